"""The loss ledger within seconds: `analytics --follow` puts each loss into History's ledger as soon as
the event log has it, marked provisional, while the Spark runs (tens of seconds under load) count it.

A thread of its own follows only the losses and their retractions (one ordered consumer per kind: the
server filters, so a busy log of acks costs it nothing) and writes, per burst, one SQLite transaction:
- a loss the job has not covered yet (its log sequence past the job's offset, read in the same
  statement that inserts) becomes a provisional row, unless its event id has a row already (a copy, a
  replay, or the job's own row): no loss twice;
- a retraction takes a provisional loss of its batch back, now or when the loss comes after it.
The job's run deletes the provisional rows it covers in the transaction that writes its own: its rows,
with their context, replace them. A provisional row carries no context (elections, updates, other
losses, gaps nearby): the pages show it as not counted yet, never as 0.

Every record is verified as the job verifies it; one that is not an event the collector signed is
counted and skipped. A loss whose stream is not in its event (a fast batch's, known only from its
acks) waits for the job, which fills it: a provisional row never says "(unknown)".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

from console.analytics.source import SourceOptions
from console.broker.log_reader import RawRecord, follow_subjects
from console.domain.events import LOST_KINDS, UNKNOWN_STREAM, BatchEvent, EventKind, MalformedEvent, verified_event
from console.domain.live_model import loss_kind_and_reason
from console.storage import ledger, sqlite
from console.storage.tables import EVENTS_SOURCE

log = logging.getLogger(__name__)

FOLLOWED = (*LOST_KINDS, EventKind.LOSS_RETRACTED)
BACKLOG = 100_000  # at start, no further back than this many sequences: older losses wait for the job
RETRACTIONS_KEPT = 10_000  # batches whose retraction is remembered for a loss that comes after it
WRITE_AT_MOST = 1_000  # records in one transaction
RETRY_EVERY = 5  # seconds between tries to follow the event log while it cannot be
QUEUED_AT_MOST = 100_000  # records waiting for the writer (a flood of forged ones): past it, left to the job


def provisional_row(seq: int, event: BatchEvent) -> dict[str, Any] | None:
    """The ledger's row for a loss as the job would write it, without its context; None for a loss whose
    stream the event does not name."""
    if event.kind not in LOST_KINDS or not event.stream or event.stream == UNKNOWN_STREAM:
        return None
    kind, reason = loss_kind_and_reason(event)  # the reason as the job keeps it: none is none, not "unknown"
    return {"event_id": event.event_id, "time": event.time, "stream": event.stream, "batch_id": event.batch_id,
            "kind": kind, "reason": reason, "account": event.account, "unverified": bool(event.unverified),
            "publisher": event.publisher.line() if event.publisher else None, "domain": event.domain, "log_seq": seq}


class Retractions:
    """The latest retraction of each of the last RETRACTIONS_KEPT batches: a loss at or before it is none."""

    def __init__(self, kept: int = RETRACTIONS_KEPT):
        self.kept, self._at = kept, OrderedDict[str, datetime]()

    def add(self, batch_id: str, at: datetime) -> None:
        if batch_id not in self._at or self._at[batch_id] < at:
            self._at[batch_id] = at
        self._at.move_to_end(batch_id)
        while len(self._at) > self.kept:
            self._at.popitem(last=False)

    def overrules(self, row: dict[str, Any]) -> bool:
        at = self._at.get(row["batch_id"]) if row["batch_id"] else None
        return at is not None and at >= row["time"]


class LedgerTail:
    """The thread; `start()`, then `stop()`. `rows_written`, `skipped` and `left` for a report."""

    def __init__(self, source: SourceOptions, db_path: Any) -> None:
        self.source, self.engine = source, sqlite.open_db(db_path)
        self.retractions = Retractions()
        self.rows_written = 0
        self.skipped = 0  # records that are not events the collector signed
        self.left = 0  # records not queued (QUEUED_AT_MOST waiting): their losses come with the job's run
        self._queue: asyncio.Queue[RawRecord] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._follow()), name="ledger-tail", daemon=True)

    def start(self) -> LedgerTail:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._loop is not None and self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(timeout=10)

    async def _follow(self) -> None:
        self._loop, self._done = asyncio.get_running_loop(), asyncio.Event()
        self._queue = queue = asyncio.Queue[RawRecord](QUEUED_AT_MOST)
        options = self.source
        writer = asyncio.create_task(self._write(queue))
        said = False
        try:
            while not self._done.is_set():
                try:  # from past the job's offset each time: what is read again is put once all the same
                    await follow_subjects(options.connection, options.stream,
                                          [f"{options.prefix}.{kind.value}.>" for kind in FOLLOWED],
                                          lambda last: max(sqlite.offset(self.engine, EVENTS_SOURCE) + 1,
                                                           last - BACKLOG, 1),
                                          self._queued, self._done)
                except Exception as e:  # no server yet, no event log yet (a fresh `up`): asked again
                    if not said:
                        log.warning("analytics --follow: losses reach History at each run until the event log "
                                    "can be followed (%r); trying again every %d s", e, RETRY_EVERY)
                        said = True
                    try:
                        await asyncio.wait_for(self._done.wait(), RETRY_EVERY)
                    except asyncio.TimeoutError:
                        pass
        finally:
            writer.cancel()

    def _queued(self, record: RawRecord) -> None:
        assert self._queue is not None
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self.left += 1

    async def _write(self, queue: asyncio.Queue[RawRecord]) -> None:
        while True:
            records = [await queue.get()]
            while not queue.empty() and len(records) < WRITE_AT_MOST:
                records.append(queue.get_nowait())
            try:
                self.write(records)
            except Exception as e:  # a locked or broken database: these wait for the job, the tail goes on
                log.warning("analytics --follow: %d losses left to the next run (%r)", len(records), e)

    def write(self, records: list[RawRecord]) -> None:
        """One transaction for a burst of records: their provisional rows, their retractions."""
        rows, retracted = [], []
        for record in records:
            try:
                event = verified_event(self.source.event_key, record.data, record.headers, self.source.event_system)
            except MalformedEvent:
                self.skipped += 1
                continue
            if event.kind is EventKind.LOSS_RETRACTED and event.batch_id:
                self.retractions.add(event.batch_id, event.time)
                retracted.append((event.batch_id, event.time))
            elif (row := provisional_row(record.seq, event)) is not None and not self.retractions.overrules(row):
                rows.append(row)
        if rows or retracted:
            ledger.put_provisional(self.engine, rows, retracted, max(r.seq for r in records))
            self.rows_written += len(rows)
