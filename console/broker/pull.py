"""Replay: fetch and next on a durable pull consumer, or on an ephemeral ordered consumer that only
peeks. Spoken on nats-py's core client with the simplified JetStream consumer API's status handling
(nats-py's own fetch hides which status ended a request, and swallows cancellation)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from console.broker import names
from console.domain.messages import Ack, FetchResult, MalformedAckSubject, StoredMessage, in_batch_order, to_ack_metadata
from console.errors import ReadOnlyError, ReplayError

# Statuses that end a pull request normally; any other status is an error the user must see.
ENDINGS = {"404": "no messages", "408": "request expired"}
ENDING_409 = ("Message Size Exceeds MaxBytes", "Leadership Change", "Batch Completed")
CLIENT_MARGIN = 1.0  # seconds past `expires` before the client gives up on the server's answer


def to_stored_message(msg: Msg, peek: bool) -> StoredMessage:
    meta = to_ack_metadata(msg.reply)
    headers = tuple((k, v) for k, v in (msg.headers or {}).items())
    return StoredMessage(msg.subject, meta.stream_seq, meta.consumer_seq, meta.time, headers, msg.data,
                         meta.delivered, meta.pending, None if peek else msg.reply)


class ConsumerReader:
    """One cursor over a stream. `durable` names an existing pull consumer; without it the reader makes
    an ephemeral ordered consumer (no acks, no side effects). Read-only allows only the peek: a fetch
    from a durable consumer delivers its messages, taking them from its real subscribers until ack wait."""

    def __init__(self, nc: Client, stream: str, durable: str | None = None, *, start_seq: int | None = None,
                 start_time: datetime | None = None, read_only: bool = False, api_prefix: str = "$JS.API"):
        self.stream = names.stream(stream)
        self.durable = None if durable is None else names.consumer(durable)
        self.nc, self.read_only = nc, read_only
        self.api_prefix = api_prefix
        self._start_seq, self._start_time = start_seq, start_time
        self._ephemeral: str | None = None
        self._last_stream_seq = 0
        self._last_consumer_seq = 0

    @property
    def peek(self) -> bool:
        return self.durable is None

    @property
    def consumer(self) -> str | None:
        return self.durable or self._ephemeral

    async def open(self) -> ConsumerReader:
        if self.peek and self._ephemeral is None:
            await self._create_ephemeral(self._start_seq, self._start_time)
        return self

    async def _create_ephemeral(self, start_seq: int | None, start_time: datetime | None) -> None:
        if start_seq:
            policy = DeliverPolicy.BY_START_SEQUENCE
        elif start_time:
            policy = DeliverPolicy.BY_START_TIME
        else:
            policy = DeliverPolicy.ALL
        config = ConsumerConfig(deliver_policy=policy, ack_policy=AckPolicy.NONE, inactive_threshold=300,
                                mem_storage=True, num_replicas=1, opt_start_seq=start_seq or None,
                                opt_start_time=start_time if policy is DeliverPolicy.BY_START_TIME else None)
        info = await self.nc.jetstream(prefix=self.api_prefix).add_consumer(self.stream, config)
        self._ephemeral, self._last_consumer_seq = info.name, 0

    async def fetch(self, max_messages: int = 10, max_bytes: int | None = None, expires: float = 2.0,
                    on_message: Callable[[StoredMessage], None] | None = None) -> FetchResult:
        if self.read_only and not self.peek:
            raise ReadOnlyError("read-only mode: only peeks; a fetch from a durable consumer delivers its messages")
        await self.open()
        request = {"batch": max_messages, "expires": int(expires * 1e9)}
        if max_bytes:
            request["max_bytes"] = max_bytes
        inbox = f"_INBOX.{uuid.uuid4().hex}"
        sub = await self.nc.subscribe(inbox)
        messages: list[StoredMessage] = []
        try:
            await self.nc.publish(f"{self.api_prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}",
                                  json.dumps(request).encode(), reply=inbox)
            while len(messages) < max_messages:
                try:
                    msg = await sub.next_msg(timeout=expires + CLIENT_MARGIN)
                except nats.errors.TimeoutError:
                    if max_bytes and messages:  # the server closes a request whose byte budget it used up silently
                        return FetchResult(tuple(messages), "max bytes reached")
                    return FetchResult(tuple(messages), "no answer", "the server did not answer the pull request")
                status = (msg.headers or {}).get("Status") if not msg.reply else None
                if status:
                    if status == "100":
                        continue  # idle heartbeat
                    ended, error = self._status(status, (msg.headers or {}).get("Description", ""))
                    return FetchResult(tuple(messages), ended, error)
                try:
                    stored = to_stored_message(msg, self.peek)
                except MalformedAckSubject as e:
                    return FetchResult(tuple(messages), "unexpected reply", str(e))
                if self.peek and stored.consumer_seq != self._last_consumer_seq + 1:
                    await self._reset()  # an ordered consumer never skips: start again after the last one shown
                    return FetchResult(tuple(messages), "consumer reset after a sequence gap")
                self._last_stream_seq, self._last_consumer_seq = stored.stream_seq, stored.consumer_seq
                messages.append(stored)
                if on_message:
                    on_message(stored)
            return FetchResult(tuple(messages), "all requested messages")
        finally:
            await sub.unsubscribe()

    async def next(self, expires: float = 2.0) -> FetchResult:
        return await self.fetch(1, expires=expires)

    @staticmethod
    def _status(status: str, description: str) -> tuple[str, str | None]:
        if status in ENDINGS:
            return ENDINGS[status], None
        if status == "409" and description in ENDING_409:
            return description.lower(), None
        if status == "503":
            return "no responders", "no consumer answers: it was deleted, or JetStream is unavailable"
        return f"status {status}", f"{status} {description}".strip()

    async def _reset(self) -> None:
        await self.close()
        await self._create_ephemeral(self._last_stream_seq + 1, None)

    async def ack(self, message: StoredMessage, kind: Ack = Ack.ACK, timeout: float = 2.0) -> None:
        """Ack, nak, term or in-progress, confirmed by the server."""
        if self.read_only:
            raise ReadOnlyError("read-only mode: ack, nak, term and in-progress are refused")
        if message.ack_subject is None:
            raise ReplayError("this message came from a peek: there is nothing to acknowledge")
        try:
            await self.nc.request(message.ack_subject, kind.value, timeout=timeout)
        except nats.errors.TimeoutError:
            raise ReplayError(f"the server did not confirm {kind.name.lower()} of stream seq {message.stream_seq}") \
                from None

    async def close(self) -> None:
        if self._ephemeral:
            name, self._ephemeral = self._ephemeral, None
            try:
                await self.nc.jetstream(prefix=self.api_prefix).delete_consumer(self.stream, name)
            except Exception:  # it expires by itself (inactive_threshold)
                pass


@dataclass(frozen=True)
class BatchReplay:
    messages: tuple[StoredMessage, ...]  # in batch sequence order
    scanned: int
    complete: bool  # the commit message was found


async def replay_batch(nc: Client, stream: str, batch_id: str, *, start_seq: int | None = None,
                       start_time: datetime | None = None, scan_limit: int = 100_000, chunk: int = 500,
                       on_progress: Callable[[int], None] | None = None) -> BatchReplay:
    """Every stored message of one atomic batch, found by its Nats-Batch-Id header. The server stores a
    committed batch's messages together, so the scan stops at its commit. Fast-ingest messages carry no
    batch headers and cannot be found this way."""
    reader = ConsumerReader(nc, stream, start_seq=start_seq, start_time=start_time)
    found: list[StoredMessage] = []
    scanned = 0
    try:
        while scanned < scan_limit:
            result = await reader.fetch(min(chunk, scan_limit - scanned), expires=1.0)
            if result.error:
                raise ReplayError(result.error)
            scanned += len(result.messages)
            for message in result.messages:
                if message.batch_id == batch_id:
                    found.append(message)
                    if message.header("Nats-Batch-Commit"):
                        return BatchReplay(tuple(in_batch_order(found)), scanned, True)
            if on_progress:
                on_progress(scanned)
            if not result.messages or result.messages[-1].pending == 0:
                break
    finally:
        await reader.close()
    return BatchReplay(tuple(in_batch_order(found)), scanned, False)
