"""JetStream publishes whose acknowledgements are read as the connection parses them: one inbox for all,
a token per message, and no future, task or standard-library JSON read per message (nats-py's
publish_async makes each of those: most of what an event cost the event log to write)."""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass, field

from console.broker.capture import Inbound, Subscriptions
from console.broker.connection import Connection
from console.broker.wire_out import HeadedOutgoing
from console.domain.replies import ApiError, MalformedReply, PubAck, to_reply
from console.domain.wire import MalformedInput, stream_name


class NotStored(Exception):
    """The server did not say it stored a message; why, for whoever sends it again."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server said of one message: stored (a duplicate of one stored before, or not), or why not."""

    duplicate: bool = False
    error: str | None = None
    permanent: bool = False  # the server refused it itself (a 4xx): sending it again cannot help


@dataclass
class _Call:
    """One caller's messages: the answers in, and how many are still out."""

    out: int = 0
    answers: dict[str, Answer] = field(default_factory=dict)
    all_in: asyncio.Event = field(default_factory=asyncio.Event)


STORED = Answer()


def plain_pub_ack(stream: str) -> re.Pattern[bytes] | None:
    """The bytes of the server's PubAck of a message `stream` stored, as it writes it with no domain and no
    duplicate: read at once, as the JSON parser would read it. None for a name its JSON would escape."""
    if not (stream.isascii() and stream.isprintable()) or '"' in stream or "\\" in stream:
        return None
    try:
        stream_name(stream)  # one a PubAck can name
    except MalformedInput:
        return None
    return re.compile(rb'\{"stream":"' + re.escape(stream.encode()) + rb'","seq":(?:0|[1-9][0-9]{0,17})\}')


def answer_of(msg: Inbound, stream: str | None = None, plain: re.Pattern[bytes] | None = None) -> Answer:
    """The server's acknowledgement read totally: anything but a PubAck (of `stream`, when given) or the
    server's error is no answer it gave (a retry, never a message taken for stored). `plain`: `stream`'s
    plain_pub_ack."""
    if msg.no_responders:
        return Answer(error="no responders: no stream took the message")
    if plain is not None and plain.fullmatch(msg.data) is not None:
        return STORED
    try:
        reply = to_reply(msg.data)
    except MalformedReply as e:
        return Answer(error=f"not an acknowledgement: {e.reason}")
    if isinstance(reply, PubAck):
        if stream is not None and reply.stream != stream:
            return Answer(error=f"acknowledged by stream {reply.stream}, not {stream}")
        return Answer(duplicate=reply.duplicate)
    if isinstance(reply, ApiError):
        return Answer(error=f"{reply.description} (error {reply.err_code}, code {reply.code})",
                      permanent=400 <= reply.code < 500)
    return Answer(error="not an acknowledgement")


class Acknowledged:
    """Publishes on one connection, each answered on this object's own inbox (a later answer to one is
    dropped: the first is the stream's, or a responder's that beat it, which `stream` tells apart)."""

    def __init__(self, nc: Connection, stream: str | None = None):
        self.nc, self.stream = nc, stream  # the stream that must acknowledge, when one
        self._plain = plain_pub_ack(stream) if stream is not None else None  # its usual PubAck, read at once
        self._inbox: str | None = None
        self._subs = Subscriptions()
        self._tokens = itertools.count()
        self._calls: dict[str, _Call] = {}  # token still out -> its caller's
        self._opening = asyncio.Lock()
        self._out = HeadedOutgoing(nc)  # as nc.publish sends them, without its per-message work

    async def publish(self, messages: list[tuple[str, bytes, dict[str, str]]], within: float
                      ) -> list[Answer | BaseException | None]:
        """Each (subject, body, headers) published, then its answer, waited for `within` seconds in all:
        an Answer, the exception that kept it from being sent, or None (no answer in time)."""
        inbox = await self._open()
        call = _Call()
        sent: list[str | BaseException] = []
        for subject, body, headers in messages:
            token = str(next(self._tokens))
            self._calls[token] = call
            call.out += 1
            try:
                await self._out.send(subject, body, inbox + token, headers)
            except Exception as e:  # not even sent (reconnecting, buffer full)
                del self._calls[token]
                call.out -= 1
                sent.append(e)
                continue
            sent.append(token)
        if call.out:
            try:
                await asyncio.wait_for(call.all_in.wait(), within)
            except asyncio.TimeoutError:
                pass
        for each in sent:  # given up on: an answer after this is dropped
            if isinstance(each, str):
                self._calls.pop(each, None)
        return [each if isinstance(each, BaseException) else call.answers.get(each) for each in sent]

    async def _open(self) -> str:
        """The inbox, subscribed once (again, after a failed try)."""
        async with self._opening:
            if self._inbox is None:
                inbox = self.nc.new_inbox() + "."
                await self._subs.read(self.nc, inbox + "*", self._on_answer)
                self._inbox = inbox
            return self._inbox

    def _on_answer(self, msg: Inbound) -> None:
        token = msg.subject[len(self._inbox or ""):]
        if (call := self._calls.pop(token, None)) is None:  # late, after its caller gave up, or no answer of ours
            return
        call.answers[token] = answer_of(msg, self.stream, self._plain)
        call.out -= 1
        if not call.out:
            call.all_in.set()
