"""A month's report of the loss budgets (each budget as it stands now is console.storage.budgets.statuses_now,
which the analytics job writes after a run as well; the losses that spent one, console.queries.reads)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine

from console.domain.budgets import MEASURES, Objective, counts_of
from console.domain.monthly_report import MonthReport, ObjectiveMonth, month_bounds
from console.storage.budgets import count_rows


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
