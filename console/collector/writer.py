"""The collector's one way into the event log: a bounded queue of events, stored in batches (each
batch's publishers stamped first), retried with backoff until stored; an event the log can never
take is quarantined and skipped. Only a stop gives up, once its grace period is over."""

from __future__ import annotations

import asyncio
import logging
import time

from console.backoff import Backoff
from console.broker.eventlog import Appended, EventLog
from console.broker.quarantine import Quarantine
from console.collector.health import Health
from console.collector.publishers import Publishers
from console.domain.events import BatchEvent
from console.domain.wire import Tally

log = logging.getLogger(__name__)
BATCH = 1000  # events stored in one append at most


async def survive(errors: Tally, where: str, error: BaseException, pause: float = 0.2) -> None:
    """A transient failure: counted, said, and paused over; never the end of a loop."""
    errors.add(f"{where}: {type(error).__name__}")
    log.warning("%s failed (%r); going on", where, error)
    await asyncio.sleep(pause)


class EventWriter:
    def __init__(self, event_log: EventLog, quarantine: Quarantine, publishers: Publishers, health: Health,
                 rejected: Tally, errors: Tally, max_queued: int):
        self.log, self.quarantine, self.publishers, self.health = event_log, quarantine, publishers, health
        self.rejected, self.errors = rejected, errors
        self._queue: asyncio.Queue[BatchEvent | None] = asyncio.Queue(max_queued)  # None: stop
        self.events_written = 0
        self.duplicates = 0
        self.stop_deadline = float("inf")  # a stop sets it: past it, what the log does not take is given up

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def put(self, events: list[BatchEvent], source: str) -> None:
        for event in events:
            try:
                self._queue.put_nowait(event.but(source=source))
            except asyncio.QueueFull:
                self.rejected.add("event queue full")

    async def run(self) -> None:
        """Stores the queue in batches; not cancelled but ended by end()'s None, so nothing in hand is lost."""
        while True:
            events = [await self._queue.get()]
            while not self._queue.empty() and len(events) < BATCH:
                events.append(self._queue.get_nowait())
            stopping = events[-1] is None
            await self.store(await self.publishers.stamp([e for e in events if e is not None]))
            if stopping:
                return

    async def end(self) -> None:
        """After the last put: run() stores what is queued, then returns."""
        await self._queue.put(None)

    async def store(self, events: list[BatchEvent]) -> bool:
        """Into the log, retried with backoff until stored (a crash here is safe: ids dedup the retry);
        False only when a stop's grace period ran out first."""
        backoff = Backoff(first=0.2, most=5.0)
        self.health.writing(time.monotonic())
        try:
            while events:
                try:
                    result = await self.log.append(events)
                except Exception as e:  # whatever it was, these events are still ours to store
                    result = Appended(retry=events, error=e)
                self.events_written += result.stored
                self.duplicates += result.duplicates
                for event, why in result.refused:
                    self.rejected.add(f"event: {why}"[:200])
                    await self.quarantine.offer("event", why, event.subject("refused"), event.to_json())
                events = result.retry
                if not events:
                    return True
                if time.monotonic() >= self.stop_deadline:
                    log.error("stopping: %d events not stored, the event log did not answer (%r)", len(events),
                              result.error)
                    return False
                await survive(self.errors, "event log append", result.error or TimeoutError("no answer"),
                              backoff.wait())
            return True
        finally:
            self.health.written()
