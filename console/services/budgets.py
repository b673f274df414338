"""The losses that spent a loss budget, and a month's report of them (each budget as it stands now is
console.storage.budgets.statuses_now, which the analytics job writes after a run as well)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Engine

from console.domain.budgets import MEASURES, Objective, counts_of
from console.domain.monthly_report import MonthReport, ObjectiveMonth, month_bounds
from console.storage.budgets import count_rows


def spenders(objective: Objective, engine: Engine, now: datetime | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """The losses that spent the objective's budget over its window, newest first: the batches it covers
    that were lost, and the fast batches that lost messages in gaps."""
    from console.storage.budgets import losses_in

    now = now or datetime.now(timezone.utc)
    mine = [r for r in losses_in(engine, now - objective.window, now)
            if objective.covers(r["stream"], r["publisher"].split(", ")[0] or None)]
    return mine[:limit]


def month_report(objectives: list[Objective], engine: Engine, month: str) -> MonthReport:
    """The month's losses from History's tables, and each objective's measures over the month."""
    from console.storage import report

    start, end = month_bounds(month)
    rows = count_rows(engine, start, end - timedelta(microseconds=1))
    found = [ObjectiveMonth(o, measure, counts_of(o, measure, rows)) for o in objectives for measure in MEASURES
             if o.allowed(measure) is not None]
    lost = {d["day"]: d for d in report.by_day(engine, start, end)}
    days = [(start + timedelta(days=n)).date().isoformat() for n in range((end - start).days)]
    return MonthReport(month, report.by_stream(engine, start, end), report.by_publisher(engine, start, end),
                       [lost.get(day, {"day": day, "batches": 0, "messages": 0}) for day in days], found)
