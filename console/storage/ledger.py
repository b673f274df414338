"""The loss ledger's provisional rows (console.analytics.ledger_tail): put as the event log has them,
taken back by a retraction, settled by the job's run that covers them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy import DateTime, bindparam, text
from sqlmodel import Session, col, delete

from console.storage.tables import EVENTS_SOURCE, LEDGER_TAIL, AbandonedBatch

# Only a loss the job has not covered yet (its offset read in the statement that inserts: no stale read),
# and only once: a row with its event id (a copy, a replay, the job's own row) stays as it is.
_INSERT = text(
    "INSERT OR IGNORE INTO abandoned_batches (event_id, time, stream, batch_id, kind, reason, account, unverified,"
    " publisher, domain, log_seq, leader_elections, stream_updates, other_abandonments, gaps_nearby, provisional)"
    " SELECT :event_id, :time, :stream, :batch_id, :kind, :reason, :account, :unverified, :publisher, :domain, :log_seq,"
    " 0, 0, 0, 0, 1"
    " WHERE :log_seq > COALESCE((SELECT seq FROM job_offsets WHERE source = :job), 0)"
).bindparams(bindparam("time", type_=DateTime()))  # stored as the job's rows store theirs: compared as text
_RETRACT = text("DELETE FROM abandoned_batches WHERE provisional AND batch_id = :batch_id"
                " AND time <= :time").bindparams(bindparam("time", type_=DateTime()))
_MOVED = text("INSERT INTO job_offsets (source, seq, updated) VALUES (:source, :seq, :updated)"
              " ON CONFLICT(source) DO UPDATE SET seq = max(seq, :seq), updated = :updated"
              ).bindparams(bindparam("updated", type_=DateTime()))


def put_provisional(engine: Engine, rows: list[dict[str, Any]], retracted: list[tuple[str, datetime]],
                    seq: int) -> None:
    """One transaction: the losses' rows (each with every column of provisional_row), the losses their
    batches' retractions take back, and where the ledger has moved to (`seq`, for the pages)."""
    with engine.begin() as conn:  # its first statement is a write: it holds the lock before reading the offset
        if rows:
            conn.execute(_INSERT, [{**row, "job": EVENTS_SOURCE} for row in rows])
        for batch_id, at in retracted:
            conn.execute(_RETRACT, {"batch_id": batch_id, "time": at})
        conn.execute(_MOVED, {"source": LEDGER_TAIL, "seq": seq, "updated": datetime.now(timezone.utc)})


def settle(session: Session, last: int) -> None:
    """The provisional rows up to `last` go, in the transaction of the job's run that writes its own."""
    session.exec(delete(AbandonedBatch).where(col(AbandonedBatch.provisional).is_(True),
                                              col(AbandonedBatch.log_seq) <= last))
