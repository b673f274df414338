"""A batch publisher's messages onto nats-py's outgoing buffer, without nats-py's per-message work.

nats-py's `publish` validates both subjects with a regular expression, builds headers key by key,
formats the command through str-to-bytes conversions and updates its statistics on every call: over
half of a fast-ingest publisher's CPU at 128 B (bench/publish.py). A batch's reply subjects and headers
share one head the publisher made and checked, and its subject is mostly the same each time, so these
check a subject once, build the command with one bytes format and append it where nats-py's flusher
takes it, as its publish does. Anything unusual (other headers, a connection not connected, a payload
past the server's limit, a nats-py without these fields) goes through `nc.publish` itself: a subscriber
receives the same message either way (tests/integration/test_wire_out.py).
"""

from __future__ import annotations

import re

from nats.aio.client import Client

from console.broker.nats_internals import OutBuffer

_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")  # nats-py's publish refuses whitespace and controls too
_PLAIN_HEADER = re.compile(r"[A-Za-z0-9-]+")  # a key nats-py writes as it is
_PLAIN_VALUE = re.compile(r"[^\s\x00-\x1f\x7f](?:[^\r\n\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?")  # a value too
class _Outgoing:
    MAX_SUBJECTS = 1024  # subjects checked once each (a batch's one; the event log's, one a kind and stream)

    def __init__(self, nc: Client):
        self.nc = nc
        self._buffer = OutBuffer(nc)
        self.direct = self._buffer.usable  # else every message through nc.publish
        self._checked: dict[str, bytes] = {}  # subject -> its bytes, found safe

    def _writable(self, subject: str, payload: bytes) -> bytes | None:
        """The subject's bytes when this message may go straight to the buffer; None: through nc.publish."""
        if not self.direct or not self.nc.is_connected or len(payload) > self._buffer.max_payload():
            return None
        if (found := self._checked.get(subject)) is None:
            if not subject or _UNSAFE.search(subject):
                return None  # nats-py's publish raises its own BadSubjectError
            found = subject.encode()
            if len(self._checked) < self.MAX_SUBJECTS:
                self._checked[subject] = found
        return found

    def _append(self, command: bytes, payload_size: int) -> bool:
        """The command in nats-py's buffer; True when its flusher is to be woken or waited for."""
        return self._buffer.append(command, payload_size)

    async def _flush(self) -> None:
        await self._buffer.flush()


class FastOutgoing(_Outgoing):
    """One fast-ingest batch's messages: each reply subject is `<head><seq>.<op>.$FI`."""

    def __init__(self, nc: Client, reply_head: str):
        super().__init__(nc)
        self.reply_head, self._head = reply_head, reply_head.encode()

    async def send(self, subject: str, payload: bytes, seq: int, op: int = 1,
                   headers: dict[str, str] | None = None) -> None:
        """As `nc.publish(subject, payload, f"{reply_head}{seq}.{op}.$FI", headers)`."""
        if headers or (subject_bytes := self._writable(subject, payload)) is None:
            await self.nc.publish(subject, payload, f"{self.reply_head}{seq}.{op}.$FI", headers)
            return
        if self._append(b"PUB %b %b%d.%d.$FI %d\r\n%b\r\n" % (subject_bytes, self._head, seq, op, len(payload),
                                                                  payload), len(payload)):
            await self._flush()


class AtomicOutgoing(_Outgoing):
    """One atomic batch's staged messages: headers `Nats-Batch-Id` and `Nats-Batch-Sequence`, no reply."""

    def __init__(self, nc: Client, batch_id: str):
        super().__init__(nc)
        self.batch_id = batch_id
        self._head = b"NATS/1.0\r\nNats-Batch-Id: %b\r\nNats-Batch-Sequence: " % batch_id.encode()

    async def send(self, subject: str, payload: bytes, seq: int, headers: dict[str, str]) -> None:
        """As `nc.publish(subject, payload, headers=headers)`, where `headers` are the batch's own (id and
        sequence) and, past those two, the caller's."""
        if len(headers) > 2 or (subject_bytes := self._writable(subject, payload)) is None:
            await self.nc.publish(subject, payload, headers=headers)
            return
        header = b"%b%d\r\n\r\n" % (self._head, seq)
        if self._append(b"HPUB %b %d %d\r\n%b%b\r\n" % (subject_bytes, len(header), len(header) + len(payload),
                                                             header, payload), len(payload)):
            await self._flush()


class HeadedOutgoing(_Outgoing):
    """Messages each with a reply and headers of its own (the event log's appends: an id and a signature)."""

    async def send(self, subject: str, payload: bytes, reply: str, headers: dict[str, str]) -> None:
        """As `nc.publish(subject, payload, reply, headers)`; headers whose key or value nats-py would
        rewrite (white space about them, a line break) go through it."""
        if (subject_bytes := self._writable(subject, payload)) is None or not reply or _UNSAFE.search(reply) \
                or not all(_PLAIN_HEADER.fullmatch(k) and _PLAIN_VALUE.fullmatch(v) for k, v in headers.items()):
            await self.nc.publish(subject, payload, reply=reply, headers=headers)
            return
        header = b"NATS/1.0\r\n%b\r\n" % b"".join(b"%b: %b\r\n" % (k.encode(), v.encode()) for k, v in headers.items())
        if self._append(b"HPUB %b %b %d %d\r\n%b%b\r\n" % (subject_bytes, reply.encode(), len(header),
                                                              len(header) + len(payload), header, payload), len(payload)):
            await self._flush()
