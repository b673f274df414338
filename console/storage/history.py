"""What the History page, the incident search and the notebooks read from the SQLite serving tables.
Every query reads the hourly aggregates or an indexed range, so a year of history stays fast."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Callable

import pandas as pd
from sqlalchemy.engine import Engine
from sqlalchemy import func
from sqlmodel import Session, col, select

from console.domain.display import as_utc
from console.storage.tables import (
    EVENTS_SOURCE,
    HEARTBEATS_CHECKED,
    AbandonedBatch,
    AbandonmentHourly,
    ConsumerLagHourly,
    CaptureInterruption,
    Maintenance,
    FastBatchSummary,
    GapHourly,
    LEDGER_TAIL,
    JobOffset,
    StreamAbandonmentStats,
)


def _select(*columns: Any) -> Any:
    """SQLModel's select, whose types take four columns at most and a column as its value's type: the query
    built on it is checked by the tests that run it."""
    return select(*columns)


def _frame(session: Session, query: Any, columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(list(session.exec(query)), columns=columns)


Sees = Callable[[str | None], bool]  # whether the reader sees a stream (console.queries.sight): None, every one


def _seen(frame: pd.DataFrame, sees: Sees | None) -> pd.DataFrame:
    if sees is None or frame.empty:
        return frame
    return frame[[sees(s or None) for s in frame["stream"]]].reset_index(drop=True)


def _summed(frame: pd.DataFrame, sees: Sees, by: list[str], sums: dict[str, str]) -> pd.DataFrame:
    """Per-stream rows of the streams the reader sees, summed over them as the query would have."""
    seen = _seen(frame, sees)
    return seen.groupby(by, as_index=False, sort=False).agg(sums)[[*by, *sums]] if len(seen) else \
        pd.DataFrame(columns=[*by, *sums])


def _utc(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    for column in columns:  # written in UTC; SQLite may hand them back without a zone
        frame[column] = pd.to_datetime(frame[column], utc=True).astype("datetime64[ns, UTC]")
    return frame


def abandonments_by_hour(engine: Engine, start: datetime, end: datetime, sees: Sees | None = None) -> pd.DataFrame:
    """hour, reason, batches: summed over streams (those the reader sees)."""
    h = AbandonmentHourly
    with Session(engine) as s:
        if sees is not None:
            q = _select(h.hour, h.stream, h.reason, h.batches).where(h.hour >= start, h.hour < end).order_by(h.hour)
            return _utc(_summed(_frame(s, q, ["hour", "stream", "reason", "batches"]), sees, ["hour", "reason"],
                                {"batches": "sum"}), "hour")
        q = (_select(h.hour, h.reason, func.sum(h.batches)).where(h.hour >= start, h.hour < end)
             .group_by(h.hour, h.reason).order_by(h.hour))
        return _utc(_frame(s, q, ["hour", "reason", "batches"]), "hour")


def abandonments_by_stream(engine: Engine, start: datetime, end: datetime, sees: Sees | None = None) -> pd.DataFrame:
    """stream, kind, reason, batches; the most abandoned streams first."""
    h = AbandonmentHourly
    total = func.sum(h.batches)
    with Session(engine) as s:
        q = (_select(h.stream, h.kind, h.reason, total).where(h.hour >= start, h.hour < end)
             .group_by(h.stream, h.kind, h.reason).order_by(total.desc(), h.stream))
        return _seen(_frame(s, q, ["stream", "kind", "reason", "batches"]), sees)


def gaps_by_hour(engine: Engine, start: datetime, end: datetime, sees: Sees | None = None) -> pd.DataFrame:
    g = GapHourly
    with Session(engine) as s:
        if sees is not None:
            q = _select(g.hour, g.stream, g.gaps, g.lost).where(g.hour >= start, g.hour < end).order_by(g.hour)
            return _utc(_summed(_frame(s, q, ["hour", "stream", "gaps", "lost"]), sees, ["hour"],
                                {"gaps": "sum", "lost": "sum"}), "hour")
        q = (_select(g.hour, func.sum(g.gaps), func.sum(g.lost)).where(g.hour >= start, g.hour < end)
             .group_by(g.hour).order_by(g.hour))
        return _utc(_frame(s, q, ["hour", "gaps", "lost"]), "hour")


def fast_outcomes(engine: Engine, start: datetime, end: datetime, sees: Sees | None = None) -> pd.DataFrame:
    b = FastBatchSummary
    with Session(engine) as s:
        if sees is not None:
            q = _select(b.outcome, b.stream, b.lost).where(b.started >= start, b.started < end)
            frame = _seen(_frame(s, q, ["outcome", "stream", "lost"]), sees).assign(batches=1)
            found = frame.groupby("outcome", as_index=False).agg({"batches": "sum", "lost": "sum"})
            return found.sort_values("batches", ascending=False, ignore_index=True)[["outcome", "batches", "lost"]]
        q = (_select(b.outcome, func.count(), func.sum(b.lost)).where(b.started >= start, b.started < end)
             .group_by(b.outcome).order_by(func.count().desc()))
        return _frame(s, q, ["outcome", "batches", "lost"])


def stream_stats(engine: Engine, sees: Sees | None = None) -> pd.DataFrame:
    """Per stream: abandonments in all, first and last, mean time between them."""
    st = StreamAbandonmentStats
    with Session(engine) as s:
        frame = _frame(s, _select(st.stream, st.abandonments, st.first, st.last, st.mean_seconds)
                       .order_by(col(st.abandonments).desc()),
                       ["stream", "abandonments", "first", "last", "mean_seconds"])
    return _utc(_seen(frame, sees), "first", "last")


def abandoned_batches(engine: Engine, start: datetime | None = None, end: datetime | None = None,
                      batch_id: str | None = None, limit: int = 500, stream: str | None = None,
                      sees: Sees | None = None, domain: str | None = None) -> pd.DataFrame:
    """The newest lost batches in a range (of one stream, of one JetStream domain), or every record of one
    batch id."""
    a = AbandonedBatch
    q = _select(a.time, a.stream, a.batch_id, a.kind, a.reason, a.unverified, a.leader_elections, a.stream_updates,
               a.other_abandonments, a.gaps_nearby, a.publisher, a.provisional, a.domain)
    if batch_id is not None:
        q = q.where(a.batch_id == batch_id)
    if domain is not None:
        q = q.where(a.domain == domain)
    if stream is not None:
        q = q.where(a.stream == stream)
    if start is not None:
        q = q.where(a.time >= start)
    if end is not None:
        q = q.where(a.time < end)
    with Session(engine) as s:
        frame = _frame(s, q.order_by(col(a.time).desc()).limit(limit),
                       ["time", "stream", "batch_id", "kind", "reason", "unverified", "leader_elections",
                        "stream_updates", "other_abandonments", "gaps_nearby", "publisher", "provisional", "domain"])
    return _utc(_seen(frame, sees), "time")


def capture_interruptions(engine: Engine, start: datetime, end: datetime) -> pd.DataFrame:
    """The blind windows that overlap a range, newest first: losses in them may be missing."""
    c = CaptureInterruption
    with Session(engine) as s:
        frame = _frame(s, _select(c.start, c.end, c.reason).where(c.start < end, c.end >= start)
                       .order_by(col(c.start).desc()).limit(500), ["start", "end", "reason"])
    return _utc(frame, "start", "end")


def maintenances(engine: Engine, start: datetime, end: datetime, sees: Sees | None = None) -> pd.DataFrame:
    """The console's maintenances that overlap a range, newest first, with what the ledger said of each;
    to a reader limited to some streams (`sees`) without the ledger's counts, which are over every stream."""
    m = Maintenance
    with Session(engine) as s:
        frame = _frame(s, _select(m.start, m.end, m.action, m.nodes, m.actor, m.lost, m.unexpected, m.outcome)
                       .where(m.start < end, m.end >= start).order_by(col(m.start).desc()).limit(500),
                       ["start", "end", "action", "nodes", "actor", "lost", "unexpected", "outcome"])
    if sees is not None:
        frame = frame.drop(columns=["lost", "unexpected", "outcome"])
    return _utc(frame, "start", "end")


def consumer_lag_by_hour(engine: Engine, start: datetime, end: datetime, sees: Sees | None = None) -> pd.DataFrame:
    """Each consumer's hours (of the streams the reader sees): reads, the most pending, the longest and mean
    lag in seconds, the reads that found it stalled; the consumers most behind first in each hour."""
    c = ConsumerLagHourly
    with Session(engine) as s:
        q = (_select(c.hour, c.stream, c.consumer, c.reads, c.max_pending, c.max_lag_seconds, c.mean_lag_seconds,
                    c.stalled_reads).where(c.hour >= start, c.hour < end)
             .order_by(c.hour, col(c.max_lag_seconds).desc()).limit(50_000))
        frame = _frame(s, q, ["hour", "stream", "consumer", "reads", "max_pending", "max_lag_seconds",
                              "mean_lag_seconds", "stalled_reads"])
    return _utc(_seen(frame, sees), "hour")


def job_position(engine: Engine) -> tuple[int, datetime] | None:
    """(the last event-log sequence in History, when the job's run that took it committed), or None
    before the first run. A check that found only heartbeats past the offset counts as a run."""
    with Session(engine) as s:
        row = s.get(JobOffset, EVENTS_SOURCE)
        if row is None:
            return None
        checked = s.get(JobOffset, HEARTBEATS_CHECKED)
        if checked is not None and checked.seq > row.seq:
            row = checked
        return row.seq, as_utc(row.updated)


def ledger_moved(engine: Engine) -> int:
    """Where `analytics --follow` last put a loss into the ledger ahead of the job's run (0: never): a page
    reads the ledger again when this moves, as when the job's position does."""
    with Session(engine) as s:
        row = s.get(JobOffset, LEDGER_TAIL)
        return row.seq if row else 0


def ledger_position(engine: Engine) -> tuple[tuple[int, datetime] | None, int]:
    """What a page's ledger was read at: the job's position and where `--follow` last put a loss."""
    return job_position(engine), ledger_moved(engine)


QUERIES = (job_position, abandonments_by_hour, abandonments_by_stream, gaps_by_hour, fast_outcomes, stream_stats,
           abandoned_batches, capture_interruptions, maintenances, consumer_lag_by_hour)
BY_STREAM = (abandonments_by_hour, abandonments_by_stream, gaps_by_hour, fast_outcomes, stream_stats, abandoned_batches,
             maintenances, consumer_lag_by_hour)


class Reader:
    """The queries above bound to one database, for pages and notebooks: `reader.gaps_by_hour(start, end)`;
    `sees`: of the streams the reader sees alone (console.queries.sight), every row and sum."""

    # bound in __init__, each the query of that name without its engine (and its `sees`)
    job_position: Callable[[], tuple[int, datetime] | None]
    ledger_moved: Callable[[], int]
    ledger_position: Callable[[], tuple[tuple[int, datetime] | None, int]]
    abandonments_by_hour: Callable[..., pd.DataFrame]
    abandonments_by_stream: Callable[..., pd.DataFrame]
    gaps_by_hour: Callable[..., pd.DataFrame]
    fast_outcomes: Callable[..., pd.DataFrame]
    stream_stats: Callable[..., pd.DataFrame]
    abandoned_batches: Callable[..., pd.DataFrame]
    capture_interruptions: Callable[..., pd.DataFrame]
    maintenances: Callable[..., pd.DataFrame]
    consumer_lag_by_hour: Callable[..., pd.DataFrame]

    def __init__(self, engine: Engine, sees: Sees | None = None) -> None:
        self.engine = engine
        for query in (*QUERIES, ledger_moved, ledger_position):
            bound = functools.partial(query, engine, sees=sees) if sees is not None and query in BY_STREAM else \
                functools.partial(query, engine)
            setattr(self, query.__name__, bound)

    def seen_by(self, sees: Sees) -> Reader:
        return Reader(self.engine, sees)


class ReaderAcross:
    """Several NATS systems' histories as one, for the History page's "all systems": every table with its
    `system` first (newest first where it has a time); the job's position is the sum of the systems'
    sequences at the oldest of their last runs (so "N events behind Live" counts every system's)."""

    def __init__(self, readers: dict[str, Reader]):
        self.readers = readers
        for query in QUERIES[1:]:
            setattr(self, query.__name__, functools.partial(self._across, query.__name__))

    def seen_by(self, sees: Sees) -> ReaderAcross:
        return ReaderAcross({name: reader.seen_by(sees) for name, reader in self.readers.items()})

    def job_position(self) -> tuple[int, datetime] | None:
        found = [p for p in (r.job_position() for r in self.readers.values()) if p is not None]
        return (sum(seq for seq, _ in found), min(t for _, t in found)) if found else None

    def ledger_moved(self) -> int:
        return sum(r.ledger_moved() for r in self.readers.values())

    def ledger_position(self) -> tuple[tuple[int, datetime] | None, int]:
        return self.job_position(), self.ledger_moved()

    def _across(self, name: str, *args: Any, **kwargs: Any) -> pd.DataFrame:
        frames = []
        for system, reader in self.readers.items():
            frame = getattr(reader, name)(*args, **kwargs)
            frame.insert(0, "system", system)
            frames.append(frame)
        merged = pd.concat(frames, ignore_index=True)
        return merged.sort_values("time", ascending=False, ignore_index=True) if "time" in merged else merged
