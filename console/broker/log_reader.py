"""Reading a sequence range of the event log without a live state: what the Spark source's executors
run, each with a connection of its own. Records come back raw; decoding them is the caller's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from console.broker.connection import asked_again, connect
from console.config import ConnectionSettings
from console.errors import ConsoleError, EventLogMissingError


@dataclass(frozen=True)
class RawRecord:
    seq: int
    data: bytes
    headers: dict[str, str] | None
    stored: datetime


async def _connect(settings: ConnectionSettings) -> Client:
    return await connect(settings, give_up_after=settings.connect_timeout + 1,
                         allow_reconnect=False)  # NatsUnreachableError names the URL


async def stream_bounds(settings: ConnectionSettings, stream: str) -> tuple[int, int]:
    """(first, last) sequence of the log; EventLogMissingError when there is none."""
    nc = await _connect(settings)
    try:
        state = (await nc.jetstream().stream_info(stream)).state
        return state.first_seq, state.last_seq
    except nats.js.errors.NotFoundError:
        raise EventLogMissingError(stream) from None
    finally:
        await nc.close()


async def first_seq_on(settings: ConnectionSettings, stream: str, subjects: list[str], first: int) -> int | None:
    """The lowest sequence >= `first` of a message on any of `subjects`, or None: one message get per
    subject, no consumer."""
    nc = await _connect(settings)
    try:
        js = nc.jetstream()

        async def head(subject: str) -> int | None:
            try:
                found: int | None = (await js.get_msg(stream, seq=first, subject=subject, next=True)).seq
                return found
            except nats.js.errors.NotFoundError:
                return None

        return min((seq for seq in await asyncio.gather(*map(head, subjects)) if seq is not None), default=None)
    finally:
        await nc.close()


async def _ordered_consumer(js: JetStreamContext, subject: str, stream: str, start: int,
                            cb: Callable[[Msg], Awaitable[None]] | None = None) -> JetStreamContext.PushSubscription:
    # a consumer request can time out while a cluster elects leaders: it is asked again, with a config
    # each time (nats-py fills in the one it is given: two consumers given one delivered each other's records)
    return await asked_again(lambda: js.subscribe(subject, stream=stream, ordered_consumer=True, cb=cb,
                                                  config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                                                        opt_start_seq=start)))


async def read_range(settings: ConnectionSettings, stream: str, subject: str, first: int, last: int,
                     idle_timeout: float) -> list[RawRecord]:
    """The records on `subject` with first <= seq <= last, in order, with an ordered consumer."""
    nc = await _connect(settings)
    records: list[RawRecord] = []
    try:
        js = nc.jetstream()
        try:  # the first matching message at or after `first`, without a consumer
            head = await js.get_msg(stream, seq=first, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return records
        if head.seq is None or head.seq > last:
            return records
        sub = await _ordered_consumer(js, subject, stream, head.seq)
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle_timeout)
                except nats.errors.TimeoutError:
                    raise ConsoleError(f"no message for {idle_timeout}s while reading {stream} {first}..{last}") from None
                seq = msg.metadata.sequence.stream
                if seq > last:
                    break
                records.append(RawRecord(seq, msg.data, msg.headers, msg.metadata.timestamp))
                if seq == last or msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    finally:
        await nc.close()
    return records


async def follow_subjects(settings: ConnectionSettings, stream: str, subjects: list[str],
                          start: Callable[[int], int], on_record: Callable[[RawRecord], None],
                          done: asyncio.Event) -> None:
    """Every record on these subjects from `start(the log's last sequence now)` on, live, to `on_record`
    (one ordered consumer each: the server filters), until `done` is set."""
    nc = await connect(settings, give_up_after=settings.connect_timeout)
    try:
        js = nc.jetstream()
        try:
            first = start((await js.stream_info(stream)).state.last_seq)
        except nats.js.errors.NotFoundError:
            raise EventLogMissingError(stream) from None

        async def each(msg: Msg) -> None:
            on_record(RawRecord(msg.metadata.sequence.stream, msg.data, msg.headers, msg.metadata.timestamp))

        for subject in subjects:
            await _ordered_consumer(js, subject, stream, first, each)
        await done.wait()
    finally:
        await nc.close()
