"""The Checks page: the batch health checks' findings as the alerts part last evaluated them (every
check_every seconds; the same as `batch-console check` and /metrics), by severity, each with its
evidence, its remedy, a link to its stream's page, and when it was first and last seen."""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any, Callable

import pandas as pd
import panel as pn
import param

from console.domain.checks import CHECKS, SEVERITIES
from console.ui.formatting import Clocked, put, tabulator
from console.ui.history import stream_cell

# What an operator decides on first, then the long texts: at 1280 px the times stay in view
# What is wrong, where, and what to do in view at 1280 px (with a system's column too): the times after
COLUMNS = ["severity", "code", "stream", "check", "evidence", "remedy", "first seen", "last seen"]
ANY = "(any)"
Stored = tuple[list[dict[str, Any]], "datetime | None", list[tuple[str, str]]]


class ChecksPage(Clocked, pn.viewable.Viewer):
    findings = param.Callable(doc="() -> (findings, when they were evaluated, what could not be checked)")
    severity: param.Selector[str] = param.Selector(default=ANY, objects=[ANY, *reversed(SEVERITIES[1:])],
                                                   doc="Only findings this severe")
    stream = param.String(default="", doc="Only this stream's findings")
    by_system = param.Boolean(default=False, doc="Several NATS systems' findings: each with its system")
    rows = param.DataFrame(default=pd.DataFrame(columns=COLUMNS),
                           doc="The findings the filters show, as plain values (the table shows them marked up)")
    state = param.String(default="", doc="When the checks ran, what they found, what they could not check")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        # Evidence and remedy are read whole: wrapped (the textarea formatter escapes what it shows)
        cells = {"severity": {"type": "html"}, "stream": {"type": "html"},
                 **{c: {"type": "textarea"} for c in ("check", "evidence", "remedy")}}
        # "last seen" is the evaluation's time for every finding shown (the state line says it): kept in
        # `rows`, left out of the table, so the remedy is in view at 1280 px
        if self.by_system:
            self.rows = pd.DataFrame(columns=_columns(True))
        self._table = tabulator(self.rows, height=480, formatters=cells, hidden_columns=["last seen"],
                                widths={"check": 170, "evidence": 300, "remedy": 320})
        w = pn.widgets
        self._layout = pn.Column(
            pn.pane.Markdown("## Checks"), pn.pane.Markdown(self.param.state),
            pn.Row(w.Select.from_param(self.param.severity, name="severity", width=160),
                   w.TextInput.from_param(self.param.stream, name="stream", width=200)),
            self._table, sizing_mode="stretch_width")

    refresh_every_ms = 5000  # the alerts part stores a new evaluation every check_every seconds

    def read(self) -> None:
        """The alerts part's SQLite: local and quick, so in the web's first answer."""
        self._show(*self.findings())

    def refresh(self) -> None:
        self.read()

    async def reload(self) -> None:
        self.read()

    @param.depends("severity", "stream", watch=True)
    def _filtered(self) -> None:
        self.read()

    def _show(self, found: list[dict[str, Any]], when: datetime | None, unchecked: list[tuple[str, str]]) -> None:
        if when is None:
            self.state = ("No evaluation stored yet: the checks run in the alerts part (`batch-console alerts`, or "
                          "`up`), every check_every seconds; `batch-console check` runs them once from a shell.")
        else:
            worst = max((f["severity"] for f in found), key=SEVERITIES.index, default="ok")
            skipped = "; ".join(f"{html.escape(c)}: {html.escape(w)}" for c, w in unchecked)
            self.state = (f"**{worst.upper()}**: {len(found)} finding(s) of {len(CHECKS) - len(unchecked)} checks run, "
                          "evaluated "
                          f"{self.clock.when(when)}" + (f". Not checked: {skipped}" if skipped else ""))
        wanted = [f for f in found if (self.severity == ANY or f["severity"] == self.severity)
                  and (not self.stream.strip() or f["stream"] == self.stream.strip())]
        wanted.sort(key=lambda f: (-SEVERITIES.index(f["severity"]), f["code"], f["stream"]))
        self.rows = pd.DataFrame([_row(f, self.clock.when) for f in wanted], columns=_columns(self.by_system),
                                 dtype=object)
        put(self._table, _marked_up(self.rows))

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


COLOURS = {"critical": "#c92a2a", "warning": "#e67700", "info": "#1971c2"}


def _columns(by_system: bool) -> list[str]:
    return [COLUMNS[0], "system", *COLUMNS[1:]] if by_system else COLUMNS


def _row(f: dict[str, Any], when: Callable[[datetime], str]) -> dict[str, Any]:
    return {"severity": f["severity"], "system": f.get("system", ""), "code": f["code"], "check": f["title"], "stream": f["stream"] or "",
            "evidence": f["evidence"], "remedy": f["remedy"],
            "first seen": when(f["first_seen"]), "last seen": when(f["last_seen"])}


def _marked_up(rows: pd.DataFrame) -> pd.DataFrame:
    """For the table: the severity coloured, the stream a link to its page (a notebook's `rows` stay plain:
    `rows[rows.severity == "critical"]` finds them)."""
    out = rows.copy()
    out["severity"] = [f'<b style="color:{COLOURS.get(s, "inherit")}">{html.escape(s)}</b>' for s in out["severity"]]
    systems = list(out["system"]) if "system" in out else [None] * len(out)
    out["stream"] = [stream_cell(s, system=system) if s else "" for s, system in zip(out["stream"], systems)]
    return out
