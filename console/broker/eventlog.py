"""The event log: a JetStream stream of console events, deduplicated on Nats-Msg-Id = event_id."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import AsyncIterator

import nats.errors
import nats.js.errors
from nats.js.api import ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

from console.domain.events import BatchEvent, MalformedEvent, event_from_json

DAY = 86_400.0


@dataclass(frozen=True)
class EventLogSettings:
    stream: str = "BATCH_CONSOLE_EVENTS"
    subject_prefix: str = "batch_console.events"
    max_age: float = 30 * DAY
    # Long enough to cover a collector restart: a redelivered advisory must hit the same window.
    duplicate_window: float = 600.0
    append_timeout: float = 10.0


def missing_log(stream: str) -> str:
    """What to show when there is no event log to read yet."""
    return f"no event log {stream} yet (is the collector running?)"


class EventLog:
    def __init__(self, js: JetStreamContext, settings: EventLogSettings = EventLogSettings()):
        self.js = js
        self.settings = settings

    async def ensure(self) -> None:
        """Create the stream, or bring an existing one's retention and dedup window in line."""
        s = self.settings
        config = StreamConfig(
            name=s.stream, subjects=[f"{s.subject_prefix}.>"], storage=StorageType.FILE,
            max_age=s.max_age, duplicate_window=s.duplicate_window,
        )
        try:
            await self.js.stream_info(s.stream)
            await self.js.update_stream(config)
        except nats.js.errors.NotFoundError:
            await self.js.add_stream(config)

    async def append(self, events: list[BatchEvent]) -> tuple[int, int]:
        """Store events; returns (stored, duplicates). Raises if the log did not acknowledge all of them."""
        if not events:
            return 0, 0
        prefix = self.settings.subject_prefix
        futures = [
            await self.js.publish_async(e.subject(prefix), e.to_json(), headers={"Nats-Msg-Id": e.event_id})
            for e in events
        ]
        # Bounded: a reconnect can leave a publish unanswered; the caller retries, ids dedup.
        acks = await asyncio.wait_for(asyncio.gather(*futures), self.settings.append_timeout)
        duplicates = sum(1 for ack in acks if ack.duplicate)
        return len(acks) - duplicates, duplicates

    async def last_seq(self) -> int:
        return (await self.js.stream_info(self.settings.stream)).state.last_seq

    async def read(self, start_seq: int = 1, end_seq: int | None = None, kind_filter: str = ">",
                   idle_timeout: float = 2.0) -> list[tuple[int, BatchEvent]]:
        """Events with start_seq <= seq <= end_seq (default: up to the last one now), in order."""
        end = end_seq if end_seq is not None else await self.last_seq()
        if end < start_seq:
            return []
        sub = await self._subscribe(DeliverPolicy.BY_START_SEQUENCE, kind_filter, opt_start_seq=start_seq)
        return await self._drain(sub, lambda seq, _: seq > end, idle_timeout, last_seq=end)

    async def window(self, start: datetime, end: datetime, kind_filter: str = ">",
                     idle_timeout: float = 2.0) -> list[tuple[int, BatchEvent]]:
        """Events stored between two times, in order (the incident view's minutes around a batch)."""
        sub = await self._subscribe(DeliverPolicy.BY_START_TIME, kind_filter, opt_start_time=start.isoformat())
        return await self._drain(sub, lambda _, stored: stored > end, idle_timeout)

    @staticmethod
    async def _drain(sub, past_end, idle_timeout: float, last_seq: int | None = None) -> list[tuple[int, BatchEvent]]:
        out: list[tuple[int, BatchEvent]] = []
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle_timeout)
                except nats.errors.TimeoutError:
                    break  # nothing matching the filter remains
                seq = msg.metadata.sequence.stream
                if past_end(seq, msg.metadata.timestamp):
                    break
                try:
                    out.append((seq, event_from_json(msg.data)))
                except MalformedEvent:
                    pass
                if msg.metadata.num_pending == 0 or seq == last_seq:
                    break
        finally:
            await sub.unsubscribe()
        return out

    async def follow(self, since: datetime | int, kind_filter: str = ">") -> AsyncIterator[tuple[int, BatchEvent]]:
        """Every event from `since` on (a time, or a stream sequence), then live; malformed entries are skipped."""
        if isinstance(since, int):
            sub = await self._subscribe(DeliverPolicy.BY_START_SEQUENCE, kind_filter, opt_start_seq=since)
        else:
            sub = await self._subscribe(DeliverPolicy.BY_START_TIME, kind_filter, opt_start_time=since.isoformat())
        try:
            async for msg in sub.messages:
                try:
                    yield msg.metadata.sequence.stream, event_from_json(msg.data)
                except MalformedEvent:
                    continue
        finally:
            await sub.unsubscribe()

    async def _subscribe(self, policy: DeliverPolicy, kind_filter: str, **start):
        return await self.js.subscribe(
            f"{self.settings.subject_prefix}.{kind_filter}", ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=policy, **start),
        )
