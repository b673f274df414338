"""What a month's report reads from SQLite: History's own tables (so its numbers are History's) and the
loss budgets' counts, per stream, per publisher and per day."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy import func
from sqlmodel import Session, col, select

from console.domain.display import as_utc
from console.storage.tables import AbandonedBatch, AbandonmentHourly, BudgetCount, GapHourly


def by_stream(engine: Engine, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Per stream: batches lost (atomic, fast), messages lost in gaps, and what the budgets counted
    (messages stored, batches seen); the streams with losses first."""
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"atomic": 0, "fast": 0, "lost_messages": 0, "stored": 0,
                                                           "batches": 0})
    h, g, b = AbandonmentHourly, GapHourly, BudgetCount
    with Session(engine) as s:
        for stream, kind, n in s.exec(select(h.stream, h.kind, func.sum(h.batches)).where(
                col(h.hour) >= start, col(h.hour) < end).group_by(h.stream, h.kind)):
            rows[stream]["atomic" if kind == "atomic" else "fast"] += int(n or 0)
        for stream, lost in s.exec(select(g.stream, func.sum(g.lost)).where(
                col(g.hour) >= start, col(g.hour) < end).group_by(g.stream)):
            rows[stream]["lost_messages"] += int(lost or 0)
        for stream, stored, batches in s.exec(select(b.stream, func.sum(b.stored), func.sum(b.batches)).where(
                col(b.bucket) >= start, col(b.bucket) < end).group_by(b.stream)):
            rows[stream]["stored"] += int(stored or 0)
            rows[stream]["batches"] += int(batches or 0)
    found = [{"stream": stream, **counts} for stream, counts in rows.items()]
    return sorted(found, key=lambda r: (-(r["atomic"] + r["fast"]), -r["lost_messages"], r["stream"]))


def by_publisher(engine: Engine, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Per publisher (its connection's name and client, as objectives name it): batches lost, by kind. The
    ledger's rows of the job's runs only, as History's hourly tables count: a provisional row (put as the
    event log had it, ahead of the runs) is counted once the run that covers it has written its own."""
    a = AbandonedBatch
    rows: dict[str, dict[str, int]] = defaultdict(lambda: {"atomic": 0, "fast": 0})
    with Session(engine) as s:
        for publisher, kind, n in s.exec(select(a.publisher, a.kind, func.count()).where(
                col(a.time) >= start, col(a.time) < end, col(a.provisional).is_(False))
                .group_by(a.publisher, a.kind)):
            key = (publisher or "").split(", ")[0] or "(publisher not known)"
            rows[key]["atomic" if kind == "atomic" else "fast"] += int(n or 0)
    return sorted(({"publisher": p, **c} for p, c in rows.items()), key=lambda r: (-(r["atomic"] + r["fast"]),
                                                                                 r["publisher"]))


def by_day(engine: Engine, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Per day with a loss: batches lost and messages lost in gaps."""
    days: dict[str, dict[str, int]] = defaultdict(lambda: {"batches": 0, "messages": 0})
    h, g = AbandonmentHourly, GapHourly
    with Session(engine) as s:
        for hour, n in s.exec(select(h.hour, func.sum(h.batches)).where(
                col(h.hour) >= start, col(h.hour) < end).group_by(col(h.hour))):
            days[as_utc(hour).date().isoformat()]["batches"] += int(n or 0)
        for hour, lost in s.exec(select(g.hour, func.sum(g.lost)).where(
                col(g.hour) >= start, col(g.hour) < end).group_by(col(g.hour))):
            days[as_utc(hour).date().isoformat()]["messages"] += int(lost or 0)
    return [{"day": d, **c} for d, c in sorted(days.items())]
