"""Every consumer of some streams, read at a cost that stays flat with their number: one CONSUMER.LIST
request per stream (a page holds 256), the oldest undelivered message of each consumer that waits
(one STREAM.MSG.GET, shared by consumers at the same place), at most CONCURRENCY requests at once.
And the changes an operator makes to one consumer: pause until a time and resume (ADR-42), reset to a
sequence (2.14's CONSUMER.RESET), unpin a priority group's client, delete; each refused in read-only
mode, and a refusal of the server's raised with its code and text."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from console.broker import names
from console.broker.admin import js_api, list_streams
from console.domain.batch_ledger import BatchLedger
from console.domain.consumer_lag import (
    BATCH_ID, BATCH_SEQ, MAX_FILTERS, ConsumerRead, MalformedConsumer, NextMessage, parse_consumer, server_time,
)
from console.domain.wire import MalformedInput, Tally, bounded_int, load_object
from console.errors import ReadOnlyError, Refusal

CONCURRENCY = 16  # requests in flight at once
TIMEOUT = 5.0
MAX_PAGE_BYTES = 16 * 1024 * 1024
NO_MESSAGE = 10037  # the server's "no message found"
# The ordered consumer that reads an atomic stream's headers for its batch ends (BatchLedger) says so in
# its description; the console's own, it is left out of the consumers it lists.
LEDGER = "batch-console: the ends of atomic batches, headers only"


@dataclass(frozen=True)
class StreamSeen:
    """A stream as the consumer reads need it."""

    name: str
    atomic: bool  # allow_atomic: its consumers' positions are counted in batches
    last_seq: int


@dataclass
class ConsumersRead:
    """One read of every consumer of some streams."""

    consumers: list[ConsumerRead] = field(default_factory=list)
    next_messages: dict[tuple[str, str], NextMessage] = field(default_factory=dict)  # (stream, consumer) ->
    malformed: Tally = field(default_factory=Tally)  # reason -> consumers (or replies) left out
    unread: dict[str, str] = field(default_factory=dict)  # stream -> why its consumers were not read
    requests: int = 0


def _headers(raw: object) -> dict[str, str]:
    """The headers of a STREAM.MSG.GET reply's `hdrs` (base64 of NATS/1.0 lines); {} for what does not read."""
    if not isinstance(raw, str) or len(raw) > 64 * 1024:
        return {}
    try:
        lines = base64.b64decode(raw, validate=True).decode("utf-8", "replace").split("\r\n")
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep and key.strip():
            found.setdefault(key.strip(), value.strip())
    return found


def next_message_of(data: bytes) -> NextMessage | None:
    """A STREAM.MSG.GET reply as the next message (None: none there); MalformedConsumer for what does not read."""
    obj = load_object(data, MalformedConsumer)
    error = obj.get("error")
    if isinstance(error, dict):
        if error.get("err_code") == NO_MESSAGE:
            return None
        raise MalformedConsumer(f"message get refused: {str(error.get('description'))[:100]}")
    message = obj.get("message")
    if not isinstance(message, dict):
        raise MalformedConsumer("no 'message' object")
    seq = bounded_int(message.get("seq"), "seq", 1, error=MalformedConsumer)
    at = server_time(message.get("time"))
    headers = _headers(message.get("hdrs"))
    batch = headers.get(BATCH_ID)
    batch_seq = headers.get(BATCH_SEQ, "")
    return NextMessage(seq, at, batch[:64] if batch else None, int(batch_seq) if batch_seq.isdigit() and len(batch_seq) < 10 else 0)


def _is_ledger(item: object) -> bool:
    """The console's own batch-end reader (an ephemeral ordered consumer so described)."""
    config = item.get("config") if isinstance(item, dict) else None
    return (isinstance(config, dict) and config.get("description") == LEDGER and not config.get("durable_name")
            and config.get("headers_only") is True)


class ConsumerAdmin:
    def __init__(self, nc: Callable[[], Client], read_only: Callable[[], bool], domain: str | None = None):
        self._nc, self._read_only, self.domain = nc, read_only, domain
        self.api = names.api_prefix(domain)

    def in_domain(self, domain: str | None) -> ConsumerAdmin:
        """The same connection's consumers of another JetStream domain (a leaf node's)."""
        return self if domain == self.domain else ConsumerAdmin(self._nc, self._read_only, domain)

    # -- reads ------------------------------------------------------------------------------------

    async def read(self, streams: list[str], with_next: bool = True) -> ConsumersRead:
        """Every consumer of `streams`, and of each that waits, its oldest undelivered message."""
        found = ConsumersRead()
        gate = asyncio.Semaphore(CONCURRENCY)
        await asyncio.gather(*(self._list(stream, found, gate) for stream in streams))
        if with_next:
            await self._next_messages(found, gate)
        return found

    async def streams(self) -> list[StreamSeen]:
        """Every stream of the domain, as broker.admin.list_streams reads them (a request a page, each parsed
        totally); MalformedListing for a reply that does not read."""
        return [StreamSeen(f.settings.name, f.settings.allow_atomic, f.last_seq or 0)
                for f in (await list_streams(self._nc(), self.domain))[0]]

    async def follow_batch_ends(self, stream: str, ledger: BatchLedger) -> Subscription:
        """Every message of the stream from its first, headers only, into `ledger` (an ordered consumer: the
        server drops it once its reader is gone; a read, so read-only mode allows it)."""

        async def each(msg: Msg) -> None:
            try:
                meta = msg.metadata
                ledger.seen(meta.sequence.stream, msg.headers, meta.num_pending)
            except (ValueError, AttributeError, TypeError, IndexError):
                return

        return await self._nc().jetstream(domain=self.domain).subscribe(
            "", stream=stream, cb=each, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, headers_only=True,
            config=ConsumerConfig(description=LEDGER))

    async def _request(self, subject: str, body: dict[str, Any] | None, found: ConsumersRead,
                       gate: asyncio.Semaphore) -> bytes:
        async with gate:
            found.requests += 1
            reply = await self._nc().request(subject, json.dumps(body).encode() if body is not None else b"",
                                             timeout=TIMEOUT)
            return reply.data

    async def _list(self, stream: str, found: ConsumersRead, gate: asyncio.Semaphore) -> None:
        offset, total, seen = 0, None, set()
        while total is None or offset < total:
            try:
                data = await self._request(f"{self.api}.CONSUMER.LIST.{stream}", {"offset": offset}, found, gate)
                obj = load_object(data, MalformedConsumer, MAX_PAGE_BYTES)
            except MalformedInput as e:
                found.unread[stream] = str(e)[:200]
                return
            except Exception as e:  # a time-out, a stream deleted meanwhile: the others are read
                found.unread[stream] = f"{type(e).__name__}: {str(e)[:200]}"
                return
            if isinstance(obj.get("error"), dict):
                found.unread[stream] = str(obj["error"].get("description"))[:200]
                return
            items, total = obj.get("consumers"), obj.get("total")
            if not isinstance(items, list) or type(total) is not int or total < 0:
                found.unread[stream] = "not a consumer list"
                return
            for item in items:
                if _is_ledger(item):
                    continue
                try:
                    read = parse_consumer(item, stream)
                except MalformedInput as e:
                    found.malformed[e.reason[:100]] += 1
                    continue
                if read.name not in seen:  # one deleted between two pages moves the next page back by one
                    seen.add(read.name)
                    found.consumers.append(read)
            if not items:
                return
            offset += len(items)

    async def _next_messages(self, found: ConsumersRead, gate: asyncio.Semaphore) -> None:
        asked: dict[tuple[str, int, str], asyncio.Task[NextMessage | None]] = {}

        def ask(stream: str, seq: int, subject: str) -> asyncio.Task[NextMessage | None]:
            if (stream, seq, subject) not in asked:
                asked[stream, seq, subject] = asyncio.ensure_future(self._get(stream, seq, subject, found, gate))
            return asked[stream, seq, subject]

        async def of(read: ConsumerRead) -> None:
            subjects = read.filters or (">",)
            if len(subjects) > MAX_FILTERS:
                return
            got = [m for m in await asyncio.gather(*(ask(read.stream, read.delivered_seq + 1, s) for s in subjects))
                   if m is not None]
            if got:
                found.next_messages[read.key] = min(got, key=lambda m: m.seq)

        await asyncio.gather(*(of(r) for r in found.consumers if r.pending > 0))

    async def _get(self, stream: str, seq: int, subject: str, found: ConsumersRead,
                   gate: asyncio.Semaphore) -> NextMessage | None:
        try:
            data = await self._request(f"{self.api}.STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject},
                                       found, gate)
            return next_message_of(data)
        except MalformedInput as e:
            found.malformed[e.reason[:100]] += 1
        except Exception as e:  # a time-out: that consumer's lag in seconds is not read, the rest is
            found.malformed[type(e).__name__] += 1
        return None

    async def _api(self, subject: str, request: dict[str, Any] | None) -> dict[str, Any]:
        """js_api, a request nobody answers said as a refusal (nats-server 2.15 answers no CONSUMER.RESET of a
        stream that does not exist)."""
        try:
            return await js_api(self._nc(), subject, request, TIMEOUT)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, asyncio.TimeoutError):
            raise Refusal(0, 0, f"no answer from the server within {TIMEOUT:g} s (is there such a stream?)") from None

    async def info(self, stream: str, name: str) -> ConsumerRead:
        answer = await self._api(f"{self.api}.CONSUMER.INFO.{names.stream(stream)}.{names.consumer(name)}", None)
        try:
            return parse_consumer(answer, stream)
        except MalformedInput as e:
            raise Refusal(0, 0, str(e)) from None

    async def seq_at(self, stream: str, when: datetime) -> int:
        """The sequence of the stream's first message stored at or after `when` (Refusal when there is none)."""
        answer = await self._api(f"{self.api}.STREAM.MSG.GET.{names.stream(stream)}",
                                 {"start_time": when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")})
        message = answer.get("message")
        seq = message.get("seq") if isinstance(message, dict) else None
        if type(seq) is not int or seq < 1:
            raise Refusal(0, 0, "not a stored message")
        return seq

    # -- changes ----------------------------------------------------------------------------------

    def _writable(self) -> None:
        if self._read_only():
            raise ReadOnlyError("read-only mode: consumers are not changed")

    async def _change(self, verb: str, stream: str, name: str, request: dict[str, Any] | None) -> dict[str, Any]:
        self._writable()
        return await self._api(f"{self.api}.CONSUMER.{verb}.{names.stream(stream)}.{names.consumer(name)}", request)

    async def pause(self, stream: str, name: str, until: datetime) -> datetime | None:
        """Paused until `until` (the server's answer: None when it did not pause it, a time past)."""
        answer = await self._change("PAUSE", stream, name, {
            "pause_until": until.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")})
        return until if answer.get("paused") is True else None

    async def resume(self, stream: str, name: str) -> None:
        await self._change("PAUSE", stream, name, None)

    async def reset(self, stream: str, name: str, seq: int) -> ConsumerRead:
        """Its next message the stream's `seq` (redelivering from there, or skipping to it)."""
        answer = await self._change("RESET", stream, name, {"seq": seq})
        try:
            return parse_consumer(answer, stream)
        except MalformedInput as e:
            raise Refusal(0, 0, str(e)) from None

    async def unpin(self, stream: str, name: str, group: str) -> None:
        await self._change("UNPIN", stream, name, {"group": group})

    async def delete(self, stream: str, name: str) -> None:
        await self._change("DELETE", stream, name, None)


async def read_through(nc: Client, stream: str, durable: str, description: str) -> int:
    """A durable pull consumer (made when missing) that reads and acks every message waiting: how many."""
    js = nc.jetstream()
    await js.add_consumer(stream, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
                                                 description=description))
    reader = await js.pull_subscribe_bind(durable, stream)
    read = 0
    try:
        while True:
            try:
                messages = await reader.fetch(100, timeout=0.5)
            except asyncio.TimeoutError:  # nats-py raises its own subclass or, past its deadline, the plain one
                return read
            for message in messages:
                await message.ack()
            read += len(messages)
    finally:
        await reader.unsubscribe()
