"""The loss budgets' SQLite side: the counts the analytics job writes per 5-minute bucket, read back for an
objective's windows (by the job, the alerts part, the Budgets page, `check` and the report), and the
statuses of the job's last run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, delete, select

from console.domain.budgets import WINDOWS, BudgetStatus, CountRow, Objective, budget_statuses
from console.domain.display import as_utc
from console.storage import sqlite
from console.storage.tables import AbandonedBatch, BudgetCount, BudgetStatusRow, FastBatchSummary

if TYPE_CHECKING:
    from console.storage.history import Reader

COUNT_COLUMNS = ("stored", "fast_stored", "lost_messages", "batches", "lost_batches", "atomic_uncounted",
                 "atomic_batches", "atomic_stored", "publisher_uncounted", "atomic_unsized")


def replace_counts(session: Session, days: list[tuple[datetime, datetime]], rows: Any) -> None:
    """The counts of these days (each [from, to)) replaced by `rows` (dicts of every column)."""
    for lo, hi in days:
        session.exec(delete(BudgetCount).where(col(BudgetCount.bucket) >= lo, col(BudgetCount.bucket) < hi))
    sqlite.insert_rows(session, BudgetCount, rows)


def count_rows(engine: Engine, since: datetime, until: datetime | None = None) -> list[CountRow]:
    """Every count row of the buckets from `since` (to `until`)."""
    b = BudgetCount
    with Session(engine) as s:
        q = select(b).where(b.bucket >= since)
        if until is not None:
            q = q.where(b.bucket <= until)
        return [CountRow(as_utc(r.bucket), r.stream, r.publisher, *(getattr(r, c) for c in COUNT_COLUMNS))
                for r in s.exec(q)]


def budgets_now(objectives: list[Objective], history: Reader | None) -> list[BudgetStatus] | None:
    """Each objective's status now, from the analytics job's counts; None without objectives or history."""
    return statuses_now(objectives, history.engine) if objectives and history is not None else None


def statuses_now(objectives: list[Objective], engine: Engine, now: datetime | None = None) -> list[BudgetStatus]:
    """Each objective's measures as of `now`, summed from the counts of its window (and the longest burn
    window) at the moment asked: a window slides without a run of the job."""
    now = now or datetime.now(timezone.utc)
    longest = max([o.window for o in objectives] + list(WINDOWS.values()))
    return budget_statuses(objectives, count_rows(engine, now - longest, now), now)


def write_statuses(engine: Engine, statuses: list[BudgetStatus]) -> None:
    """The statuses of this run, in place of the last run's (an objective no longer in the file goes)."""
    with Session(engine) as s:
        s.exec(delete(BudgetStatusRow))
        for st in statuses:
            s.add(BudgetStatusRow(objective=st.objective, measure=st.measure, as_of=st.as_of, allowed=st.allowed,
                                  window_days=st.window / timedelta(days=1), lost=st.counts.lost,
                                  total=st.counts.total, known=st.counts.known, spent=st.spent,
                                  **{f"burn_{w}": v for w, v in st.burns.items()}))
        s.commit()


def status_rows(engine: Engine) -> list[BudgetStatusRow]:
    with Session(engine) as s:
        return list(s.exec(select(BudgetStatusRow).order_by(BudgetStatusRow.objective, BudgetStatusRow.measure)))


def losses_in(engine: Engine, since: datetime, until: datetime, limit: int = 2_000) -> list[dict[str, Any]]:
    """The losses a budget's window holds, newest first: lost batches (each with its publisher) and fast
    batches that lost messages in gaps (publisher not recorded there)."""
    a, f = AbandonedBatch, FastBatchSummary
    with Session(engine) as s:
        batches = s.exec(select(a).where(col(a.time) >= since, col(a.time) <= until).order_by(col(a.time).desc())
                         .limit(limit))
        found: list[dict[str, Any]] = [{"time": as_utc(b.time), "stream": b.stream, "batch_id": b.batch_id,
                  "what": f"{b.kind} batch lost: {b.reason or '?'}", "lost_messages": 0, "publisher": b.publisher or ""}
                 for b in batches]
        gapped = s.exec(select(col(f.started), col(f.stream), col(f.batch_id), col(f.lost)).where(
            col(f.started) >= since, col(f.started) <= until, col(f.lost) > 0).order_by(col(f.started).desc()).limit(limit))
        found += [{"time": as_utc(t), "stream": stream, "batch_id": batch, "what": f"{lost:,} message(s) lost in gaps",
                   "lost_messages": lost, "publisher": ""} for t, stream, batch, lost in gapped]
    return sorted(found, key=lambda r: r["time"], reverse=True)[:limit]
