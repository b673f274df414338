"""A month's losses as a report for the people who own the streams: per loss objective (its budget over
the month), per stream and per publisher, and a plot of each day. Markdown for a ticket or a wiki, HTML
(one file, its plots inline SVG, nothing fetched) for a mail. Every name in it is the wire's or the
operator's: escaped for each format."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from console.domain.budgets import Counts, Objective, spent
from console.domain.display import md

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def month_bounds(text: str) -> tuple[datetime, datetime]:
    """`2026-11` -> its first instant and the next month's, in UTC; ValueError for anything else."""
    found = MONTH.fullmatch(text) if len(text) < 16 else None
    if found is None or not 1970 <= int(found[1]) <= 2200:
        raise ValueError(f"a month is YYYY-MM, not {text[:16]!r}")
    year, month = int(found[1]), int(found[2])
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class ObjectiveMonth:
    objective: Objective
    measure: str
    counts: Counts

    @property
    def spent(self) -> float | None:
        allowed = self.objective.allowed(self.measure)
        return None if allowed is None else spent(self.counts, allowed)


@dataclass(frozen=True)
class MonthReport:
    month: str
    streams: list[dict[str, Any]]
    publishers: list[dict[str, Any]]
    days: list[dict[str, Any]]
    objectives: list[ObjectiveMonth] = field(default_factory=list)

    @property
    def lost_batches(self) -> int:
        return sum(r["atomic"] + r["fast"] for r in self.streams)

    @property
    def lost_messages(self) -> int:
        return sum(r["lost_messages"] for r in self.streams)


def _share(value: float | None) -> str:
    return "not known" if value is None else f"{value:.1%}"


def _objective_rows(report: MonthReport) -> list[list[str]]:
    return [[o.objective.name, o.measure, f"{o.counts.lost:,}", f"{o.counts.total:,}" if o.counts.known else "not known",
             _share(o.spent)] for o in report.objectives]


HEADS = {"objectives": ["objective", "measure", "lost", "of", "month's share of the budget"],
         "streams": ["stream", "atomic batches lost", "fast batches lost", "messages lost in gaps", "messages stored",
                     "batches seen"],
         "publishers": ["publisher", "atomic batches lost", "fast batches lost"]}


def _tables(report: MonthReport) -> dict[str, list[list[str]]]:
    return {"objectives": _objective_rows(report),
            "streams": [[r["stream"], f"{r['atomic']:,}", f"{r['fast']:,}", f"{r['lost_messages']:,}",
                         f"{r['stored']:,}", f"{r['batches']:,}"] for r in report.streams],
            "publishers": [[r["publisher"], f"{r['atomic']:,}", f"{r['fast']:,}"] for r in report.publishers]}


TITLES = {"objectives": "Loss budgets", "streams": "By stream", "publishers": "By publisher"}


def markdown(report: MonthReport) -> str:
    lines = [f"# Batch losses, {report.month}", "",
             f"{report.lost_batches:,} batches lost and {report.lost_messages:,} messages lost in gaps "
             f"(History's tables; the budgets' counts for messages stored and batches seen).", ""]
    for key, rows in _tables(report).items():
        lines += [f"## {TITLES[key]}", ""]
        if not rows:
            lines += ["None." if key != "objectives" else "No loss objectives (`--objectives FILE`).", ""]
            continue
        lines += ["| " + " | ".join(HEADS[key]) + " |", "|" + "---|" * len(HEADS[key])]
        lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in rows] + [""]
    lines += ["## By day", "", "| day | batches lost | messages lost in gaps |", "|---|---|---|"]
    lines += [f"| {d['day']} | {d['batches']:,} | {d['messages']:,} |" for d in report.days] or ["| (none) | 0 | 0 |"]
    return "\n".join(lines) + "\n"


def _svg_bars(days: list[dict[str, Any]], key: str, title: str, color: str) -> str:
    """A bar per day of `key`, as inline SVG (no script, nothing fetched)."""
    width, height, left, bottom = 720, 180, 48, 28
    most = max([d[key] for d in days] + [1])
    step = (width - left) / max(len(days), 1)
    bars = "".join(
        f'<rect x="{left + i * step + 1:.1f}" y="{height - bottom - (d[key] / most) * (height - bottom - 20):.1f}" '
        f'width="{max(step - 2, 1):.1f}" height="{(d[key] / most) * (height - bottom - 20):.1f}" fill="{color}">'
        f'<title>{html.escape(d["day"])}: {d[key]:,}</title></rect>' for i, d in enumerate(days))
    labels = "".join(f'<text x="{left + i * step + step / 2:.1f}" y="{height - 10}" font-size="9" text-anchor="middle">'
                     f'{html.escape(d["day"][-2:])}</text>' for i, d in enumerate(days))
    return (f'<figure><figcaption>{html.escape(title)} (most in a day: {most:,})</figcaption>'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{html.escape(title)}"><line x1="{left}" y1="{height - bottom}" x2="{width}" '
            f'y2="{height - bottom}" stroke="#888"/>{bars}{labels}</svg></figure>')


def as_html(report: MonthReport) -> str:
    e = html.escape
    parts = [f"<h1>Batch losses, {e(report.month)}</h1>",
             f"<p>{report.lost_batches:,} batches lost and {report.lost_messages:,} messages lost in gaps.</p>"]
    if report.days:
        parts += [_svg_bars(report.days, "batches", "Batches lost per day", "#c92a2a"),
                  _svg_bars(report.days, "messages", "Messages lost in gaps per day", "#e67700")]
    for key, rows in _tables(report).items():
        parts.append(f"<h2>{TITLES[key]}</h2>")
        if not rows:
            parts.append("<p>None.</p>" if key != "objectives" else "<p>No loss objectives (--objectives FILE).</p>")
            continue
        head = "".join(f"<th>{e(h)}</th>" for h in HEADS[key])
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    style = ("body{font-family:system-ui,sans-serif;color:#1d2330;max-width:960px;margin:1rem auto}"
             "table{border-collapse:collapse;margin:.5rem 0}td,th{border-bottom:1px solid #dde1e6;padding:3px 8px;"
             "text-align:left}figure{margin:.5rem 0}")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Batch losses, {e(report.month)}</title>'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")
