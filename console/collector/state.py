"""What the collector knows of open batches: the fast-ingest tracker (from the tapped replies) and
the atomic watch (from the publish side), and what stream events (elections, edits, deletes) do to
them. Readers feed it; the ticker asks it what timed out."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Callable

from console.broker.connection import Connection
from console.collector.atomic_watch import AtomicWatch
from console.domain.events import COLLECTOR, FI_TAP, PUBLISH_TAP, BatchEvent, EventKind, elected_leader
from console.domain.fast_tracker import FastBatchTracker
from console.domain.wire import Tally

Put = Callable[[list[BatchEvent], str], None]


def now() -> datetime:
    return datetime.now(timezone.utc)


class BatchState:
    def __init__(self, nc: Connection, batch_timeout: float, batch_timeout_source: str, max_batches: int,
                 errors: Tally):
        self.tracker = FastBatchTracker(batch_timeout, max_batches, clock=now)
        self.batch_timeout_source = batch_timeout_source
        self.atomic = AtomicWatch(nc, batch_timeout, max_batches, errors)
        self._stream_events: asyncio.Queue[BatchEvent] = asyncio.Queue(10_000)

    def learn_batch_timeout(self, seconds: float, source: str) -> None:
        self.tracker.batch_timeout, self.batch_timeout_source = seconds, source

    def learn(self, advisories: list[BatchEvent]) -> None:
        """What advisories tell the trackers: a 10208 after an election is a leader change; an election,
        an update or a delete may drop open atomic batches (stream_event_loop looks)."""
        for event in advisories:
            if elected_leader(event) is not None and event.stream:
                self.tracker.leader_elected(event.stream, event.time)
            if not self._stream_events.full():
                self._stream_events.put_nowait(event)

    async def stream_event_loop(self, put: Put, stopping: Callable[[], bool], beat: Callable[[], None]) -> None:
        """Stream events (from the advisories) -> what they silently dropped of open atomic batches."""
        while not stopping():
            beat()
            try:
                event = await asyncio.wait_for(self._stream_events.get(), 0.5)
            except asyncio.TimeoutError:
                continue
            if found := await self.atomic.on_context(event, now()):
                put(found, PUBLISH_TAP if found[0].kind is EventKind.ATOMIC_LOST else COLLECTOR)

    def tick(self, put: Put) -> None:
        """What has timed out since the last tick."""
        put(self.tracker.tick(now()), FI_TAP)
        if lost := self.atomic.tick(now()):
            put(lost, PUBLISH_TAP)
