"""The loss ledger read after a maintenance (console.domain.ledger_verdict): the event log's records of
the window, once the collector has written its status past the window's end, so every batch open in it
has been judged (abandoned, dropped, committed) by then. The maintenance itself is written to the same
log as it begins and as it ends (console.domain.maintenance_record)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Callable

import nats.errors
import nats.js.errors

from console.broker.connection import Connection
from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.atomic_tracker import ANSWER_WAIT
from console.domain.events import BatchEvent, EventKind
from console.domain.ledger_verdict import LedgerVerdict, judge
from console.domain.maintenance_record import MaintenanceRecord
from console.errors import ConsoleError

# seconds past the batch timeout an open batch's end takes to reach the ledger: a batch an election dropped
# and never committed is named lost ANSWER_WAIT past it, then written
SETTLE = ANSWER_WAIT + 3.0
RECORD_TRIES = 3  # appends of a maintenance's record before it is said not written


class LedgerReader:
    def __init__(self, log: EventLog, batch_timeout: float, status_every: float):
        self.log, self.batch_timeout, self.status_every = log, batch_timeout, status_every

    @classmethod
    def over(cls, nc: Connection, event_log: Callable[[], EventLogSettings], batch_timeout: float,
             status_every: float) -> tuple[LedgerReader | None, str | None]:
        """The reader of the event log `event_log()` resolves, or (None, why) without its key."""
        try:
            return cls(EventLog.over(nc, event_log()), batch_timeout, status_every), None
        except ConsoleError as e:
            return None, str(e)

    async def open(self) -> LedgerWindow:
        """A maintenance's window, from now: whether a collector is recording as it starts."""
        return LedgerWindow(self, datetime.now(timezone.utc), await self.recording())

    async def recording(self, now: datetime | None = None) -> bool:
        """Whether a collector is writing the ledger: a status of its own within three of its periods."""
        now = now or datetime.now(timezone.utc)
        return await self._status_between(now - timedelta(seconds=3 * self.status_every), now)

    async def verdict(self, streams: set[str] | None, start: datetime, end: datetime, recorded_at_start: bool,
                      named: frozenset[tuple[str, str]] = frozenset()) -> LedgerVerdict:
        """The verdict over [start, end + the batch timeout]: waited for until a collector status is
        written past it (at most the batch timeout and three status periods more); a window no
        collector recorded is said as such."""
        window_end = end + timedelta(seconds=self.batch_timeout + SETTLE)
        recorded = recorded_at_start
        if recorded:
            deadline = time.monotonic() + self.batch_timeout + SETTLE + 3 * self.status_every
            while not await self._status_between(window_end, datetime.now(timezone.utc)):
                if time.monotonic() > deadline:
                    recorded = False
                    break
                await asyncio.sleep(1.0)
        events: list[BatchEvent] = []
        if recorded:
            try:
                events = [e for _, e in await self.log.window(start, window_end, idle_timeout=1.0)]
            except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
                recorded = False  # the event log gone or away since: what it holds is not known
        return judge(events, streams, start, window_end, recorded, named)

    async def _status_between(self, start: datetime, end: datetime) -> bool:
        """Whether a collector wrote its status between the two times (no event log: none did)."""
        if end <= start:
            return False
        try:
            found = await self.log.window(start, end, kind_filter=f"{EventKind.COLLECTOR_STATUS.value}.>",
                                          idle_timeout=1.0)
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
            return False
        return any(start <= e.time <= end for _, e in found)


class LedgerWindow:
    def __init__(self, reader: LedgerReader, start: datetime, recording: bool):
        self.reader, self.start, self.recording = reader, start, recording
        self.record: MaintenanceRecord | None = None
        self.finished: datetime | None = None  # when its steps were done: the ledger is read from then on
        self.no_log = False  # the event log is not there: its records are not tried again

    async def begin(self, action: str, nodes: list[str], actor: str, said: Callable[[str], None]) -> None:
        """The maintenance's first record in the event log: a loss from now on is marked as inside it."""
        self.record = MaintenanceRecord.begin(action, nodes, actor)
        await self._write(self.record, said)

    async def end(self, verdict: LedgerVerdict | None, outcome: str, said: Callable[[str], None],
                  steps: tuple[str, ...] = ()) -> None:
        """Its last record: the window the ledger was read over and what it said (None: not read), its steps."""
        if self.record is None:
            return
        proved = verdict is not None and verdict.recorded
        await self._write(self.record.ended(verdict.end if verdict else None,
                                            len(verdict.lost) if proved and verdict else None,
                                            len(verdict.unexpected) if proved and verdict else None, outcome,
                                            self.finished, steps), said)

    async def _write(self, record: MaintenanceRecord, said: Callable[[str], None]) -> None:
        if self.no_log:
            return
        why = "not sent"
        for _ in range(RECORD_TRIES):  # its id dedupes a copy of a try that was stored after all
            try:
                done = await self.reader.log.append([record.event()])
            except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError) as e:
                why = type(e).__name__
                continue
            if done.stored or done.duplicates:
                return
            why = done.refused[0][1] if done.refused else str(done.error or "not stored")
            if done.refused:
                break
            if "no responders" in why:  # no event log stream here: no collector has ever made it
                self.no_log = True
                said("no event log on this system (no collector has made it): the maintenance is in the audit "
                     "trail only")
                return
        said(f"the maintenance's {record.phase} record was not written to the event log: {why[:200]}")

    async def verdict(self, streams: set[str] | None, said: Callable[[str], None],
                      named: frozenset[tuple[str, str]] = frozenset()) -> LedgerVerdict:
        """The verdict from the window's start to now (and the batch timeout after), said when read."""
        said("reading the loss ledger for the window (the batch timeout after it too)")
        self.finished = datetime.now(timezone.utc)
        verdict = await self.reader.verdict(streams, self.start, self.finished, self.recording, named)
        said(verdict.text())
        return verdict
