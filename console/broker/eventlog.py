"""The event log: a JetStream stream of console events, deduplicated on Nats-Msg-Id = event_id."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import AsyncGenerator, Any, AsyncIterator, Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from console.broker.acks import Acknowledged, NotStored
from console.broker.nats_internals import connection_of
from console.broker.streams import StreamSpec, ensure_stream
from console.config import EventLogSettings
from console.domain.events import (
    MSG_ID,
    REPLAYED,
    BatchEvent,
    KeyTally,
    MalformedEvent,
    RecentIds,
    dump_record,
    key_mismatch,
    refusal,
    verified_event,
)
from console.domain.signing import SIGNATURE, SYSTEM, signature
from console.domain.wire import Tally

log = logging.getLogger(__name__)
STALLED_AT_MOST = 10.0  # seconds a read waits for a message the server says is pending


def missing_log(stream: str) -> str:
    """What to show when there is no event log to read yet."""
    return f"no event log {stream} yet (is the collector running?)"


@dataclass
class Appended:
    """What one append did: stored, deduplicated, refused for good (event, why), or to retry."""

    stored: int = 0
    duplicates: int = 0
    refused: list[tuple[BatchEvent, str]] = field(default_factory=list)
    retry: list[BatchEvent] = field(default_factory=list)
    error: BaseException | None = None  # the last transient failure, for the log


class EventLog:
    def __init__(self, js: JetStreamContext, settings: EventLogSettings = EventLogSettings()):
        self.js = js
        self.settings = settings
        self.skipped = Tally()  # records read and dropped, by reason: never a stall, never a failed run
        self.keys = KeyTally()  # whether the collector's statuses verify with this reader's key
        self._acked: Acknowledged | None = None  # appends' acknowledgements (their connection's, when first used)

    @classmethod
    def over(cls, nc: Client, settings: EventLogSettings = EventLogSettings()) -> EventLog:
        """The event log over a connection: how code outside broker/ opens it."""
        return cls(nc.jetstream(), settings)

    @property
    def key_problem(self) -> str | None:
        """Why nothing the collector writes verifies here (a wrong key), or None."""
        return key_mismatch(self.settings.key_source or "this reader") if self.keys.wrong else None

    def decode(self, data: bytes, headers: dict[str, str] | None, seen: RecentIds | None = None) -> BatchEvent | None:
        """One record of the log, or None (counted) when it is not a console event the collector signed
        under its own id, or when its id is among those `seen` by this read (a replay)."""
        try:
            event = verified_event(self.settings.key, data, headers, self.settings.system)
        except MalformedEvent as e:
            self.skipped.add(e.reason)
            self.keys.take(None, e.reason)
            return None
        self.keys.take(event, None)
        if seen is not None and seen.repeat(event.event_id):
            self.skipped.add(f"{REPLAYED}: event id read before")
            return None
        return event

    async def ensure(self) -> list[str]:
        """Create the stream, or add to an existing one only what the console needs (its subjects,
        a duplicate window long enough for redeliveries); the operator's other limits are kept.
        Returns what differs from what the console would have created, for the status."""
        s = self.settings
        subject = f"{s.subject_prefix}.>"
        ensured = await ensure_stream(self.js, StreamSpec(s.stream, (subject,), max_age=s.max_age,
                                                          duplicate_window=s.duplicate_window, replicas=s.replicas))
        if ensured.created:
            return []
        current = ensured.config
        notes: list[str] = []
        changes: dict[str, Any] = {}
        if subject not in (current.subjects or []):
            changes["subjects"] = [*(current.subjects or []), subject]
            notes.append(f"added subject {subject}")
        if (current.duplicate_window or 0) < s.duplicate_window:
            changes["duplicate_window"] = s.duplicate_window
            notes.append(f"duplicate window raised to {s.duplicate_window:g}s (a restart's redeliveries must dedupe)")
        if changes:
            await self.js.update_stream(replace(current, **changes))
        if current.max_age and current.max_age != s.max_age:
            notes.append(f"event log keeps its own max age of {current.max_age:g}s")
        for limit in ("max_msgs", "max_bytes"):
            if (getattr(current, limit) or -1) > 0:
                notes.append(f"event log keeps its own {limit} of {getattr(current, limit)}")
        return notes

    async def append(self, events: list[BatchEvent]) -> Appended:
        """Store events. Each is stored, found a duplicate, refused for good, or left to retry."""
        result = Appended()
        prefix = self.settings.subject_prefix
        sent: list[tuple[BatchEvent, tuple[str, bytes, dict[str, str]]]] = []
        for event in events:
            record = event.to_record()
            body = dump_record(record)
            if (problem := refusal(record, len(body))) is not None:  # its stream name makes the subject, and
                result.refused.append((event, f"readers would refuse it: {problem}"))  # its id the Nats-Msg-Id
                continue
            headers = {MSG_ID: event.event_id}
            if self.settings.key is not None:
                headers[SIGNATURE] = signature(self.settings.key, body, self.settings.system)
                if self.settings.system is not None:
                    headers[SYSTEM] = self.settings.system
            sent.append((event, (event.subject(prefix), body, headers)))
        if not sent:
            return result
        if self._acked is None:
            self._acked = Acknowledged(connection_of(self.js), self.settings.stream)
        # Bounded: a reconnect can leave a publish unanswered; it is retried, its id dedupes it.
        answers = await self._acked.publish([message for _, message in sent], self.settings.append_timeout)
        for (event, _), answer in zip(sent, answers):
            if isinstance(answer, BaseException):  # not even sent (reconnecting, buffer full): retry it
                result.retry.append(event)
                result.error = answer
            elif answer is None:
                result.retry.append(event)
            elif answer.error is None:
                if answer.duplicate:
                    result.duplicates += 1
                else:
                    result.stored += 1
            elif answer.permanent:
                result.refused.append((event, f"the event log refused it: {answer.error}"))
            else:
                result.retry.append(event)
                result.error = NotStored(answer.error)
        return result

    async def last_seq(self) -> int:
        return (await self.js.stream_info(self.settings.stream)).state.last_seq

    async def wait_until_there(self, every: float = 1.0) -> None:
        """Until the collector has made the log (a part that starts beside it may come first)."""
        said = False
        while True:
            try:
                await self.js.stream_info(self.settings.stream)
                return
            except nats.js.errors.NotFoundError:
                if not said:
                    log.info("%s; waiting", missing_log(self.settings.stream))
                    said = True
                await asyncio.sleep(every)

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
        sub = await self._subscribe(DeliverPolicy.BY_START_TIME, kind_filter, opt_start_time=start)
        return await self._drain(sub, lambda _, stored: stored > end, idle_timeout)

    async def _drain(self, sub: JetStreamContext.PushSubscription, past_end: Callable[[int, datetime], bool],
                     idle_timeout: float, last_seq: int | None = None) -> list[tuple[int, BatchEvent]]:
        out: list[tuple[int, BatchEvent]] = []
        seen = RecentIds()
        timeout = idle_timeout
        asked = received = False
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=timeout)
                except nats.errors.TimeoutError:
                    if not received and not asked and await self._undelivered(sub):
                        # A loaded server's first delivery, not an empty window (a drain's ledger read none of
                        # the losses beside it on a busy cluster)
                        asked, timeout = True, max(idle_timeout, STALLED_AT_MOST)
                        continue
                    break  # nothing matching the filter remains (or the server stalled past STALLED_AT_MOST)
                received = True
                seq = msg.metadata.sequence.stream
                if past_end(seq, msg.metadata.timestamp):
                    break
                if (event := self.decode(msg.data, msg.headers, seen)) is not None:
                    out.append((seq, event))
                if msg.metadata.num_pending == 0 or seq == last_seq:
                    break
                # More are pending: a pause now is a loaded server's, not the end (a check on a busy host
                # read half a window and found no collector status)
                timeout = max(idle_timeout, STALLED_AT_MOST)
        finally:
            await sub.unsubscribe()
        return out

    @staticmethod
    async def _undelivered(sub: JetStreamContext.PushSubscription) -> bool:
        """Whether the server holds records for a reader that has had none yet, or has sent some that have
        not reached it (False when it cannot say)."""
        try:
            info = await sub.consumer_info()
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
            return False
        return bool(info.num_pending) or bool(info.delivered and info.delivered.consumer_seq)

    async def follow(self, since: datetime | int, kind_filter: str = ">") -> AsyncIterator[tuple[int, BatchEvent | None]]:
        """Every record from `since` on (a time, or a stream sequence), then live: (seq, event), or
        (seq, None) for one that was skipped and counted, so a follower knows how far it has read."""
        if isinstance(since, int):
            sub = await self._subscribe(DeliverPolicy.BY_START_SEQUENCE, kind_filter, opt_start_seq=since)
        else:
            sub = await self._subscribe(DeliverPolicy.BY_START_TIME, kind_filter, opt_start_time=since)
        seen = RecentIds()  # every copy of an event after the first is skipped: counted once by every follower
        try:
            async for msg in sub.messages:
                yield msg.metadata.sequence.stream, self.decode(msg.data, msg.headers, seen)
        finally:
            await sub.unsubscribe()

    async def follow_kinds(self, since: datetime, kinds: tuple[str, ...]) -> AsyncGenerator[tuple[BatchEvent | None, int], None]:
        """The records of these kinds only from `since` on, then live (the server filters: the rest of the log
        is never sent): (event or None for one skipped and counted, how many of them wait after it)."""
        sub = await self.js.subscribe("", stream=self.settings.stream, ordered_consumer=True, config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since,
            filter_subjects=[f"{self.settings.subject_prefix}.{kind}.>" for kind in kinds]))
        seen = RecentIds()
        try:
            async for msg in sub.messages:
                yield self.decode(msg.data, msg.headers, seen), msg.metadata.num_pending
        finally:
            await sub.unsubscribe()

    async def _subscribe(self, policy: DeliverPolicy, kind_filter: str, **start: Any) -> JetStreamContext.PushSubscription:
        return await self.js.subscribe(
            f"{self.settings.subject_prefix}.{kind_filter}", ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=policy, **start),
        )
