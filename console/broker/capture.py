"""What the collector reads, as plain inbound messages: advisories captured durably by a stream, and
core subscriptions (the `$FI` reply tap, the publish side, the system account's advisories)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Awaitable, Callable, Mapping

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.client import JetStreamContext

from console.broker import wire_in
from console.broker.connection import Connection, asked_again, repaired
from console.broker.nats_internals import (handling_usable, last_sid, message_handler, set_message_handler, status_of,
                                           subscription_client, subscription_id, subscriptions)
from console.broker.replies import is_no_responders, no_responders
from console.broker.streams import StreamSpec, ensure_stream
from console.domain.atomic_tracker import BATCH_ID, KEPT_HEADERS
from console.errors import CaptureRefusedError

log = logging.getLogger(__name__)

ADVISORY_SUBJECTS = "$JS.EVENT.ADVISORY.>"
ABANDONED_SUBJECTS = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>"  # followed live too: the losses themselves
LEADER_ELECTIONS = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>"  # followed live too: they name a 10208's cause
PROBE_SUBJECT = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.probe"


_arrivals = itertools.count(1)


@dataclass
class ArrivalMsg(Msg):
    """A message stamped, as the connection reads it, with its place in the order the server sent it:
    each subscription's messages are handled by a task of its own, so across subscriptions the order
    they are handled in is not the wire's (an ack and the message sent after it can swap)."""

    arrival: int = field(default_factory=lambda: next(_arrivals))


@dataclass(slots=True)  # not frozen: one is made for every message read, and a frozen one costs 4x to make
class Inbound:
    subject: str
    data: bytes
    reply: str | None = None
    no_responders: bool = False  # a 503 status: no stream listens on the subject
    batch_headers: Mapping[str, str] = field(default_factory=dict)  # an atomic batch's headers, if any
    arrival: int = 0  # the order the connection read it in (0: not stamped)
    headers: tuple[tuple[str, str], ...] = ()  # all of them (a lost batch's messages are kept with theirs)


Handler = Callable[[Inbound], Awaitable[None]]
Reader = Callable[[Inbound], None]  # a handler that never waits
Ack = Callable[[], Awaitable[None]]


_NO_HEADERS: Mapping[str, str] = {}


def inbound(msg: Msg) -> Inbound:
    headers = msg.headers
    if not headers:  # most of what is read: replies and advisories
        return Inbound(msg.subject, msg.data, msg.reply or None, False, _NO_HEADERS, getattr(msg, "arrival", 0))
    batch = {k: headers[k] for k in KEPT_HEADERS if k in headers} if BATCH_ID in headers else {}
    return Inbound(msg.subject, msg.data, msg.reply or None, is_no_responders(msg), batch,
                   getattr(msg, "arrival", 0), tuple(headers.items()))


def _readers_of(nc: Connection) -> dict[int, Reader] | None:
    """Readers this connection hands messages to as it parses them, by subscription id: a reply is read in
    the wire's order with no message object, queue or task between the socket and its reader (a flood of
    replies costs the tap what it costs a bare subscriber, not twice that). None where nats-py reads
    otherwise than this expects: its subscriptions' own tasks then hand them over."""
    readers: dict[int, Reader] | None = getattr(nc, "_console_readers", None)
    through, subs = message_handler(nc), subscriptions(nc)
    if readers is not None or through is None or subs is None or not handling_usable(nc):
        return readers
    readers = {}
    stats = nc.stats

    def read_now(sid: int, subject: bytes, reply: bytes, data: bytes, status: dict[str, str] | None = None) -> bool:
        """The message to its reader, if a reader of this connection's subscribes to it."""
        if (reader := readers.get(sid)) is None or sid not in subs:  # another's, or unsubscribed
            return False
        if not (subject.isascii() and reply.isascii()):
            subject, reply = repaired(nc, subject, reply)
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        if status:  # a 503 status, on a reply
            msg = Inbound(subject.decode(), data, reply.decode() if reply else None, no_responders(status, data),
                          _NO_HEADERS, next(_arrivals), tuple(status.items()))
        else:  # nearly every reply
            msg = Inbound(subject.decode(), data, reply.decode() if reply else None, False, _NO_HEADERS,
                          next(_arrivals))
        try:
            reader(msg)
        except Exception:  # the reader's bug: its message is skipped, never the connection's read loop
            log.exception("a reader failed on a message of %s", subject[:200])
        return True

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        status = (await status_of(nc, headers)) if headers and sid in readers else None
        if not read_now(sid, subject, reply, data, status):  # nats-py's way
            await through(sid, subject, reply, data, headers)

    set_message_handler(nc, process_msg)
    setattr(nc, "_console_readers", readers)
    wire_in.install(nc, read_now)  # and its MSG lines read without nats-py's parser where it can
    return readers


class DurableAdvisories:
    """Advisories kept by a stream on $JS.EVENT.ADVISORY.> (an existing one is reused: the server refuses
    a second, overlapping one) and read with a durable pull consumer, each acked by the reader."""

    def __init__(self, nc: Connection, stream: str, durable: str, max_age: float, ack_wait: float,
                 replicas: int | None = None, domain: str | None = None):
        self.nc, self.js = nc, nc.jetstream(domain=domain)  # a domain: the stream is in that JetStream (a leaf's)
        self.stream, self.durable, self.max_age, self.ack_wait = stream, durable, max_age, ack_wait
        self.replicas = replicas
        self._psub: JetStreamContext.PullSubscription | None = None

    async def open(self) -> str:
        """The stream's name; CaptureRefusedError when the account may not capture them. A request
        that times out is asked again first: given up at once, the collector would stay live-only for
        its whole life; one the account may not send is refused at once."""
        try:
            return await asked_again(self._open, nc=self.nc)
        except (nats.js.errors.APIError, nats.errors.Error) as e:
            raise CaptureRefusedError(str(e)) from None

    async def _open(self) -> str:
        self.stream = await self._stream()
        await self.js.add_consumer(self.stream, ConsumerConfig(
            durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait, max_ack_pending=10_000,
        ))
        self._psub = await self.js.pull_subscribe_bind(self.durable, self.stream)
        return self.stream

    async def _stream(self) -> str:
        try:
            existing = await self.js.find_stream_name_by_subject(PROBE_SUBJECT)
            if existing:
                log.info("reusing advisory stream %s", existing)
                return existing
        except nats.js.errors.NotFoundError:
            pass
        await ensure_stream(self.js, StreamSpec(self.stream, (ADVISORY_SUBJECTS,), max_age=self.max_age,
                                                replicas=self.replicas))
        return self.stream

    async def fetch(self, batch: int, timeout: float = 1.0) -> list[tuple[Inbound, Ack]]:
        """Up to `batch` advisories with their acks; none when none came within `timeout`."""
        try:
            if self._psub is None:
                raise CaptureRefusedError("the advisory consumer is not open")
            msgs = await self._psub.fetch(batch, timeout=timeout)
        except asyncio.TimeoutError:  # nats-py raises its own subclass or the plain one
            return []
        return [(inbound(msg), msg.ack) for msg in msgs]

    async def pending(self) -> int:
        return (await self.js.consumer_info(self.stream, self.durable)).num_pending or 0


class _Handing:
    """Where a queued subscription's task is in the wire's order: the arrival of the message it last took
    from its queue, and whether its handler still holds that one."""

    __slots__ = ("sub", "last", "busy")

    def __init__(self) -> None:
        self.sub: Subscription | None = None
        self.last, self.busy = 0, False

    def first_unhanded(self) -> int | None:
        """The lowest arrival this subscription may still hand over (its queue is in the wire's order)."""
        if self.busy:
            return self.last
        if self.sub is not None and self.sub.pending_msgs:
            return self.last + 1
        return None


class Subscriptions:
    """Core subscriptions that hand Inbound messages to handlers, drained together at the end."""

    def __init__(self) -> None:
        self._handing: list[_Handing] = []  # one per subscription, made in _subscribe

    async def follow(self, nc: Connection, subject: str, handler: Handler, queue: str = "") -> None:
        async def on_msg(msg: Msg) -> None:
            await handler(inbound(msg))

        await self._subscribe(nc, subject, on_msg, queue)

    async def _subscribe(self, nc: Connection, subject: str, cb: Callable[[Msg], Awaitable[None]], queue: str) -> None:
        nc.msg_class = ArrivalMsg  # what this connection reads from now on carries its arrival
        handing = _Handing()

        async def handed(msg: Msg) -> None:
            handing.last, handing.busy = getattr(msg, "arrival", 0), True
            try:
                await cb(msg)
            finally:
                handing.busy = False

        handing.sub = await nc.subscribe(subject, queue=queue, cb=handed)
        self._handing.append(handing)

    @property
    def _subs(self) -> list[Subscription]:
        return [h.sub for h in self._handing if h.sub is not None]

    def backlog(self) -> int:
        """Messages the server has sent that wait, read, for their handler."""
        return sum(sub.pending_msgs for sub in self._subs)

    def first_unhanded(self) -> int | None:
        """The lowest arrival a subscription's task may still hand to its handler; None when every message
        read so far has been handed over (a reader handed them as they were read). Whatever is read later
        arrives later."""
        return min((at for h in self._handing if (at := h.first_unhanded()) is not None), default=None)

    async def read(self, nc: Connection, subject: str, reader: Reader, queue: str = "", queued: bool = False) -> None:
        """A reader that never waits is handed each message as the connection parses it: in the wire's order,
        with no message object, queue or task in between. `queued`: through nats-py's queue and task, as a
        handler's messages go, so that it keeps its place among those (which wait in their queues)."""
        async def on_msg(msg: Msg) -> None:  # queued, or where nats-py cannot hand them over as it reads them
            reader(inbound(msg))

        readers = None if queued else _readers_of(nc)
        if readers is None:
            await self._subscribe(nc, subject, on_msg, queue)
            return
        # the id subscribe takes before it first waits: no message comes before its reader
        expected = (last_sid(nc) or 0) + 1
        readers[expected] = reader
        await self._subscribe(nc, subject, on_msg, queue)
        if (sid := subscription_id(self._subs[-1])) != expected:  # another nats-py: in place now, and no other's reader
            readers[sid] = readers.pop(expected)

    async def tap_fast_replies(self, nc: Connection, prefix: str, reader: Reader, queue: str = "",
                               queued: bool = False) -> None:
        """Every fast-ingest reply under an inbox prefix: `_INBOX` replies have 7 tokens, `_INBOX.<nuid>` ones 8.
        queue: in a supercluster, one tap per cluster in one queue group, so that the server hands each reply
        to the tap in the cluster it is published in and none crosses a gateway to be heard."""
        for depth in (5, 6):
            await self.read(nc, ".".join([prefix] + ["*"] * depth + ["$FI"]), reader, queue, queued)

    async def drain(self, within: float) -> None:
        """Unsubscribe, then handle what the server sent before; after `within` seconds, stop waiting."""
        give_up_at = asyncio.get_running_loop().time() + within
        for sub in self._subs:
            if (readers := getattr(subscription_client(sub), "_console_readers", None)) is not None:
                readers.pop(subscription_id(sub), None)  # what is left comes nats-py's way, to be handled below
            try:
                await asyncio.wait_for(sub.drain(), max(0.1, give_up_at - asyncio.get_running_loop().time()))  # type: ignore[no-untyped-call]  # nats-py leaves drain unannotated
            except (asyncio.TimeoutError, nats.errors.Error):
                pass
        self._handing.clear()


async def stream_of_subject(nc: Connection, subject: str) -> str | None:
    """The stream that binds a subject, as the server says."""
    return await nc.jetstream().find_stream_name_by_subject(subject)


async def stream_cluster(nc: Connection, stream: str) -> str | None:
    """The cluster a stream is placed in (its leader's), as the server says; None when it says none."""
    info = await nc.jetstream().stream_info(stream)
    name = info.cluster.name if info.cluster is not None else None
    return name if isinstance(name, str) and 0 < len(name) <= 256 else None


async def stream_atomic(nc: Connection, stream: str) -> tuple[bool, datetime | None] | None:
    """Whether the stream allows atomic batches now, and when it was created; None when there is no such stream."""
    try:
        info = await nc.jetstream().stream_info(stream)
    except nats.js.errors.NotFoundError:
        return None
    created = info.created if isinstance(info.created, datetime) else None
    return bool(info.config.allow_atomic), created


async def stream_leader(nc: Connection, stream: str) -> str | None:
    """The stream's leader's server name; None on a single server. Raises while it has none."""
    cluster = (await nc.jetstream().stream_info(stream)).cluster
    if cluster is None:
        return None
    if not cluster.leader:
        raise nats.js.errors.ServiceUnavailableError()
    return cluster.leader
