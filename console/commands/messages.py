"""Commands on a stream's messages: fetch and answer them (ack, nak, term, in progress), publish one, and
republish stored or kept ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from console.domain.messages import Ack, to_ack_metadata
from console.errors import BatchServerError, ConsoleError, Refusal
from console.domain.masking import Masking
from console.commands.base import Asker, Command, Services, required

if TYPE_CHECKING:
    from console.domain.messages import FetchResult, StoredMessage
    from console.broker.publish import Republished
    from console.domain.replies import PubAck
    from console.domain.kept_messages import KeptMessage


@dataclass
class FetchMessages(Command["FetchResult"]):
    """From a durable consumer, which delivers them: an action (a peek changes nothing and is none)."""

    name, role, changes_server = "consumer.fetch", "operator", True
    records = "stream/consumer and how many messages were asked for"
    stream: str
    consumer: str
    count: int
    max_bytes: int | None = None
    expires: float = 2.0

    @property
    def on_stream(self) -> str:
        return self.stream

    @property
    def target(self) -> str:
        return f"{self.stream}/{self.consumer} {self.count}"

    async def execute(self, services: Services, asker: Asker) -> FetchResult:
        reader = required(services.streams, "streams").reader(self.stream, self.consumer)
        return await reader.fetch(self.count, max_bytes=self.max_bytes, expires=self.expires)


@dataclass
class AnswerMessage(Command[None]):
    """Ack, nak, term or in-progress on one fetched message, on the consumer that delivered it: the one its
    ack subject names, which must be the stream and consumer the command is asked (and recorded) for."""

    kind: ClassVar[Ack]
    role, changes_server = "operator", True
    records = "stream/consumer and the message's stream sequence"
    message: StoredMessage
    stream: str
    consumer: str

    @property
    def on_stream(self) -> str:
        return self.stream

    @property
    def target(self) -> str:
        return f"{self.stream}/{self.consumer} seq {self.message.stream_seq}"

    async def execute(self, services: Services, asker: Asker) -> None:
        if self.message.ack_subject is None:
            raise ConsoleError("only a message fetched from a durable consumer is acked")
        try:
            meta = to_ack_metadata(self.message.ack_subject)
        except ValueError:
            raise ConsoleError("the message's ack subject is not a JetStream one") from None
        if (meta.stream, meta.consumer) != (self.stream, self.consumer):
            raise ConsoleError(f"the message was delivered by {meta.stream[:100]}/{meta.consumer[:100]}, "
                               f"not {self.stream[:100]}/{self.consumer[:100]}")
        await required(services.streams, "streams").reader(self.stream, self.consumer).ack(self.message, self.kind)


class AckMessage(AnswerMessage):
    name, kind = "message.ack", Ack.ACK


class NakMessage(AnswerMessage):
    name, kind = "message.nak", Ack.NAK


class TermMessage(AnswerMessage):
    name, kind = "message.term", Ack.TERM


class InProgressMessage(AnswerMessage):
    name, kind = "message.in_progress", Ack.IN_PROGRESS


ANSWERS: dict[Ack, type[AnswerMessage]] = {c.kind: c for c in (AckMessage, NakMessage, TermMessage, InProgressMessage)}


@dataclass
class PublishMessage(Command["PubAck"]):
    """One message with headers on a subject of a stream (console.domain.publishing says which): the
    server's PubAck, or its refusal."""

    name, role, changes_server = "message.publish", "operator", True
    records = "the stream, the subject, the headers' names and the payload's size (never its bytes)"
    stream: str
    subject: str
    payload: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def on_stream(self) -> str:
        return self.stream

    @property
    def target(self) -> str:
        names_ = ",".join(k for k, _ in self.headers)
        return f"{self.stream} {self.subject} ({len(self.payload):,} bytes" + (f"; headers {names_}" if names_ else "") + ")"

    def said(self, result: PubAck) -> str:
        return f"stored as {result.stream} seq {result.seq}" + (" (a duplicate: not stored again)" if result.duplicate else "")

    async def execute(self, services: Services, asker: Asker) -> PubAck:
        return await required(services.streams, "streams").publish(self.stream, self.subject, self.payload, self.headers)


@dataclass
class RepublishMessages(Command["list[Republished]"]):
    """A stream's stored messages first..last published again on a subject of a stream (each once within
    the duplicate window): the server's answer for each."""

    name, role, changes_server = "message.republish", "operator", True
    records = "the range, and the stream and subject it went to"
    stream: str
    first: int
    last: int
    to_stream: str
    to_subject: str

    @property
    def on_stream(self) -> str:
        return self.stream

    @property
    def also_on_streams(self) -> tuple[str, ...]:
        return (self.to_stream,)

    @property
    def target(self) -> str:
        return f"{self.stream} seq {self.first}-{self.last} to {self.to_stream} {self.to_subject}"

    def said(self, result: list[Republished]) -> str:
        stored = sum(1 for r in result if r.stored_as)
        return f"{stored} stored, {sum(r.duplicate for r in result)} duplicates, " \
               f"{sum(r.problem is not None for r in result)} not republished"

    async def execute(self, services: Services, asker: Asker) -> list[Republished]:
        return await required(services.streams, "streams").republish(self.stream, self.first, self.last,
                                                                       self.to_stream, self.to_subject)


@dataclass
class RepublishKept(Command["PubAck"]):
    """A lost batch's kept messages (its first and last, as the publish side saw them) as a new atomic batch,
    when they are the whole batch, whole, and unmasked; else refused saying why (its publisher must resend
    it: its manifest asks it to)."""

    name, role, changes_server = "batch.republish", "operator", True
    records = "the lost batch, its stream and how many messages"
    stream: str
    batch_id: str
    messages: tuple[KeptMessage, ...] = ()

    @property
    def on_stream(self) -> str:
        return self.stream

    @property
    def target(self) -> str:
        return f"{self.stream} batch {self.batch_id} ({len(self.messages)} kept message(s))"

    def said(self, result: PubAck) -> str:
        return f"stored as batch {result.batch} of {result.count} at seq {result.seq}"

    def whole(self, masking: Masking) -> list[KeptMessage]:
        """The messages to send again, in order; ValueError saying why they are not the batch."""
        kept = sorted(self.messages, key=lambda m: m.seq)
        if not kept:
            raise ValueError(f"nothing of batch {self.batch_id} was kept (the publish side was not tapped)")
        if [m.seq for m in kept] != list(range(1, len(kept) + 1)):
            raise ValueError(f"the console keeps a lost batch's first and last messages only; batch {self.batch_id} "
                             f"had {kept[-1].seq}: its publisher must send it again (its manifest asks it to)")
        if any(m.cut for m in kept):
            raise ValueError("a kept payload was cut (past 2 KiB): it is not the message as published")
        if any(masking.for_stream(self.stream)):
            raise ValueError(f"the masking rules cover {self.stream}: its kept payloads are not as published")
        return kept

    async def execute(self, services: Services, asker: Asker) -> PubAck:
        from console.broker.atomic import AtomicBatch

        kept = self.whole(services.payloads(asker.payloads).masking)

        def headers(m: KeptMessage) -> dict[str, str]:  # its own, not the lost batch's
            return {k: v for k, v in m.headers if not k.lower().startswith(("nats-batch-", "nats-required-api-level"))}

        batch = AtomicBatch(required(services.connection, "connection")())
        try:
            for m in kept[:-1]:
                await batch.add(m.subject, m.data, headers(m))
            return await batch.commit(kept[-1].subject, kept[-1].data, headers(kept[-1]))
        except BatchServerError as e:
            raise Refusal(e.code, e.err_code, e.description) from None
