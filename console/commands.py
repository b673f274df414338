"""Every change the console can make to the world, and every export, as one command class: its name
(what roles and the audit trail call it), the least built-in role that may ask for it, whether
read-only mode refuses it, what its audit record holds, its target, and its work, done through the
services it is given (console.actions.Actions runs it: read-only, the role and the session checked,
the attempt stored before the work and the outcome after).

A new action is one class here (and its test): the registry, the roles, the audit trail and the
pages' refusals follow from it. Pages and notebooks hold commands and read-only services; the
writers (stream administration, the NATS connection a probe publishes on, the alert rules file, the
search runner) are the services' alone."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Generic, Mapping, Protocol, Sequence, TypeVar

from console.domain.messages import Ack, to_ack_metadata
from console.domain.maintenance import MOVE_TIMEOUT
from console.domain.roles import BUILT_IN
from console.errors import BatchServerError, ConsoleError, Refusal
from console.decoders.rules import one_decoder
from console.domain.masking import Masking
from console.payloads import Payloads
from console.export import SEARCH_COLUMNS, Exporter, export_bytes, format_named, found_row, search_schema, typed_row

if TYPE_CHECKING:
    from console.domain.audit import Actor
    from console.broker.admin import StreamAdmin
    from console.broker.consumers import ConsumerAdmin
    from console.domain.consumer_lag import ConsumerRead
    from console.broker.connection import Connection
    from console.broker.eventlog import EventLog
    from console.canary import CanaryOptions, CanaryRun
    from console.domain.messages import FetchResult, StoredMessage
    from console.domain.search import Found, SearchProgress, SearchQuery
    from console.domain.stream_settings import StreamBatchSettings
    from console.broker.evacuate import Evacuated
    from console.broker.maintenance import Move
    from console.broker.maintenance_ledger import LedgerReader
    from console.domain.ledger_verdict import LedgerVerdict
    from console.domain.maintenance import Restart
    from console.domain.maintenance import Plan
    from console.probe import ProbeOptions, ProbeReport
    from console.broker.publish import Republished
    from console.domain.replies import PubAck
    from console.domain.kept_messages import KeptMessage

T = TypeVar("T")
S = TypeVar("S")
MAX_TARGET = 1000  # characters of a target kept in the audit record


class RuleWriter(Protocol):
    def write_rule(self, text: str) -> str: ...
    def write_muted(self, name: str, muted: bool) -> None: ...


class Searcher(Protocol):
    def __call__(self, asker: Asker, query: SearchQuery, progress: Callable[[SearchProgress], None] | None,
                 cancelled: Callable[[], bool], on_match: Callable[[Found], None] | None
                 ) -> Awaitable[tuple[list[Found], SearchProgress]]: ...


class Asker(Protocol):
    """Who asks for a command, as the command sees them (console.actions.Actions is one): whose payload level
    holds, who is named, whether their session ended. Commands never reach back into the action layer."""

    @property
    def actor(self) -> Actor: ...

    @property
    def ended(self) -> bool: ...

    def payloads(self, stream: str) -> str: ...


@dataclass(frozen=True)
class Services:
    """What commands do their work through; a service a caller was not given is refused by name."""

    streams: StreamAdmin | None = None
    consumers: ConsumerAdmin | None = None
    connection: Callable[[], Connection] | None = None  # the one a probe publishes on now (reopened ones too)
    system_connection: Callable[[], Connection | None] | None = None  # the system account's, where given
    rules: Callable[[], RuleWriter] | None = None
    search: Searcher | None = None
    # the payload pipeline for a reader's level of each stream (Grants.payloads): exports decode through it
    payloads: Callable[[Callable[[str], str]], Payloads] = lambda level: Payloads(Masking(), None, level)


def required(service: S | None, name: str) -> S:
    """The service a command needs; one a caller was not given is refused by name."""
    if service is None:
        raise ConsoleError(f"this console was given no {name} service")
    return service


class Command(Generic[T]):
    name: ClassVar[str]
    role: ClassVar[str]  # the least built-in role that may ask for it (console.domain.roles.BUILT_IN)
    changes_server: ClassVar[bool]  # refused in read-only mode
    records: ClassVar[str]  # what its audit record holds beside who, when and the outcome

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            assert cls.name not in COMMANDS and cls.role in BUILT_IN, cls.name
            COMMANDS[cls.name] = cls

    @property
    def target(self) -> str:
        raise NotImplementedError

    @property
    def on_stream(self) -> str | None:
        """The stream it acts on, for the roles' per-stream grants (None: no one stream)."""
        return None

    @property
    def also_on_streams(self) -> tuple[str, ...]:
        """More streams it acts on (a republish's target), each checked as `on_stream` is."""
        return ()

    def diff(self) -> dict[str, list[Any]] | None:
        return None

    def said(self, result: T) -> str:
        """What its audit record says of an accepted outcome ("": nothing beyond it)."""
        return ""

    async def execute(self, services: Services, asker: Asker) -> T:
        raise NotImplementedError


COMMANDS: dict[str, type[Command[Any]]] = {}  # name -> class, filled by the classes below


def bounded(target: str) -> str:
    return target if len(target) <= MAX_TARGET else target[:MAX_TARGET - 1] + "…"


@dataclass
class EditStream(Command["StreamBatchSettings"]):
    name, role, changes_server = "stream.edit", "admin", True
    records = "the stream; each batch setting changed, before and after"
    stream: str
    changes: dict[str, tuple[Any, Any]]  # setting -> (before, after)

    @property
    def target(self) -> str:
        return self.stream

    @property
    def on_stream(self) -> str:
        return self.stream

    def diff(self) -> dict[str, list[Any]]:
        return {k: [a, b] for k, (a, b) in self.changes.items()}

    @classmethod
    def validate(cls, current: StreamBatchSettings, **proposal: Any) -> EditStream | None:
        """The edit from a stream's settings as read now to a proposal of its batch settings (None: one left
        as it is), or None when it changes nothing: the one place the Streams page and the API decide it.
        ValueError for a setting that is not a batch setting."""
        from console.domain.stream_settings import EDITABLE, diff_settings

        if unknown := set(proposal) - set(EDITABLE):
            raise ValueError(f"not a batch setting: {', '.join(sorted(unknown))[:100]}")
        wanted = current.with_changes(**{k: v for k, v in proposal.items() if v is not None})
        changes = diff_settings(current, wanted)
        return cls(current.name, dict(changes)) if changes else None

    async def execute(self, services: Services, asker: Asker) -> StreamBatchSettings:
        return await required(services.streams, "streams").apply(self.stream, **{k: b for k, (_, b) in self.changes.items()})


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
class ConsumerCommand(Command[T]):
    """A change to one consumer (console.broker.consumers), named by its stream and its name."""

    role, changes_server = "operator", True
    records = "stream/consumer (with its leaf domain) and what was asked of it"
    stream: str
    consumer: str
    domain: str = field(default="", kw_only=True)  # a leaf node's JetStream domain ("": the system's own)

    @property
    def on_stream(self) -> str:
        return self.stream

    def admin(self, services: Services) -> ConsumerAdmin:
        return required(services.consumers, "consumers").in_domain(self.domain or None)

    @property
    def asked(self) -> str:
        return ""

    @property
    def target(self) -> str:
        where = f"{self.domain}:" if self.domain else ""
        return f"{where}{self.stream}/{self.consumer}" + (f" {self.asked}" if self.asked else "")


@dataclass
class PauseConsumer(ConsumerCommand["datetime | None"]):
    """Paused until a time (ADR-42, nats-server 2.11+); the server's answer: until when (None: not paused)."""

    name = "consumer.pause"
    until: datetime = datetime.min

    @property
    def asked(self) -> str:
        return f"until {self.until.isoformat()}"

    async def execute(self, services: Services, asker: Asker) -> datetime | None:
        return await self.admin(services).pause(self.stream, self.consumer, self.until)


@dataclass
class ResumeConsumer(ConsumerCommand[None]):
    name = "consumer.resume"

    async def execute(self, services: Services, asker: Asker) -> None:
        await self.admin(services).resume(self.stream, self.consumer)


@dataclass
class ResetConsumer(ConsumerCommand["ConsumerRead"]):
    """Its next message the stream's `seq`, or the first stored at or after `time` (nats-server 2.14+)."""

    name = "consumer.reset"
    seq: int | None = None
    time: datetime | None = None

    @property
    def asked(self) -> str:
        return f"to seq {self.seq}" if self.seq is not None else f"to {self.time.isoformat()}" if self.time else ""

    def said(self, result: ConsumerRead) -> str:
        return f"next message seq {result.delivered_seq + 1}, {result.pending} pending"

    async def execute(self, services: Services, asker: Asker) -> ConsumerRead:
        consumers = self.admin(services)
        seq = self.seq if self.seq is not None else await consumers.seq_at(self.stream, self.time or datetime.now(timezone.utc))
        return await consumers.reset(self.stream, self.consumer, seq)


@dataclass
class UnpinConsumer(ConsumerCommand[None]):
    """The client pinned in one of its priority groups let go (the server pins another)."""

    name = "consumer.unpin"
    group: str = ""

    @property
    def asked(self) -> str:
        return f"group {self.group}"

    async def execute(self, services: Services, asker: Asker) -> None:
        await self.admin(services).unpin(self.stream, self.consumer, self.group)


@dataclass
class DeleteConsumer(ConsumerCommand[None]):
    name, role = "consumer.delete", "admin"

    async def execute(self, services: Services, asker: Asker) -> None:
        await self.admin(services).delete(self.stream, self.consumer)


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


@dataclass
class RunProbe(Command["ProbeReport"]):
    name, role, changes_server = "probe.run", "operator", True
    records = "the probe's kind, stream and size"
    options: ProbeOptions
    progress: Callable[[int], None] | None = None
    repair_key: bytes | None = field(default=None, repr=False)  # the event key: the console's manifests verified

    @property
    def on_stream(self) -> str:
        return self.options.stream

    @property
    def target(self) -> str:
        return f"{self.options.stream} {self.options.kind} x{self.options.count}"

    async def execute(self, services: Services, asker: Asker) -> ProbeReport:
        from console.probe import run_probe

        return await run_probe(required(services.connection, "connection")(), self.options, self.progress,
                               self.repair_key)


@dataclass
class RunCanary(Command["CanaryRun"]):
    """Canary batches through every node until `stopping()` (one round with `once`); the results go to `log`."""

    name, role, changes_server = "canary.run", "operator", True
    records = "the system, the schedule and the batches' size"
    options: CanaryOptions
    log: EventLog | None = None
    stopping: Callable[[], bool] = lambda: False

    @property
    def target(self) -> str:
        o = self.options
        return f"{o.system} " + ("once" if o.once else f"every {o.every:g}s") + f" x{o.messages}"

    async def execute(self, services: Services, asker: Asker) -> CanaryRun:
        from console.canary import run_canary

        return await run_canary(required(services.connection, "connection")(), self.options, self.log, self.stopping)


@dataclass
class DrainNode(Command["list[Move]"]):
    """Every leadership off one node, batch-safely (console.broker.maintenance.drain), under the lease."""

    name, role, changes_server = "maintain.drain", "admin", True
    records = "the node; the plan's verdict, the leaderships moved and the batches open at a step"
    plan: Plan
    time_box: float
    batch_timeout: float
    progress: Callable[[str], None] = lambda _: None
    ledger: LedgerReader | None = None  # the loss ledger, read for the drain's window once it is done
    move_timeout: float = MOVE_TIMEOUT  # an evacuation's: seconds a stream's move may take before it is cancelled
    verdict: LedgerVerdict | None = field(default=None, init=False)
    evacuated: list[Evacuated] = field(default_factory=list, init=False)  # with the plan's evacuation

    @property
    def target(self) -> str:
        return self.plan.node

    def said(self, result: list[Move]) -> str:
        from console.broker.maintenance import moves_summary

        ledger = f"; {self.verdict.text()}" if self.verdict else ""
        moved = sum(1 for e in self.evacuated if e.error is None)
        evacuated = (f"; evacuated {moved} of {len(self.evacuated)} stream(s)" if self.plan.evacuate else "") + (
            f" (not moved: {', '.join(e.stream for e in self.evacuated if e.error)})" if moved < len(self.evacuated)
            else "")
        evacuated = evacuated[:300]
        return f"plan {self.plan.verdict}; " + moves_summary(result, 1000 - len(ledger) - len(evacuated)) + \
            evacuated + ledger

    async def execute(self, services: Services, asker: Asker) -> list[Move]:
        from console.broker.maintenance import Lease, MaintenanceRefused, drain

        nc = required(services.connection, "connection")()
        if self.plan.refusals:
            raise MaintenanceRefused("; ".join(self.plan.refusals))
        evacuating = self.plan.evacuate is not None and bool(self.plan.evacuate.movable)
        if not any(g.replicas > 1 for g in self.plan.leads) and not evacuating:  # a single server, nothing led
            return []
        lease = await Lease.take(nc, asker.actor.user, self.plan.node, replicas=3 if len(self.plan.nodes) >= 3 else 1)
        window = await self.ledger.open() if self.ledger is not None else None
        outcome, moves = "interrupted", []
        try:
            if window is not None:
                await window.begin("drain", [self.plan.node], asker.actor.user, self.progress)
            try:
                moves = await drain(nc, self.plan.node, self.plan, self.time_box, self.batch_timeout,
                                    said=self.progress)
                if evacuating and self.plan.evacuate is not None:
                    from console.broker.evacuate import evacuate

                    self.evacuated = await evacuate(nc, self.plan.node, self.plan.evacuate, self.time_box,
                                                    self.batch_timeout, self.move_timeout, said=self.progress)
            finally:
                await lease.release()
            if window is not None and (moves or self.evacuated):
                at_risk = [b for m in moves for b in m.at_risk] + [b for e in self.evacuated for b in e.at_risk]
                self.verdict = await window.verdict({g.stream for g in self.plan.leads} |
                                                    {e.stream for e in self.evacuated}, self.progress,
                                                    frozenset((b.stream, b.batch_id) for b in at_risk))
            outcome = self.said(moves)
            return moves
        finally:
            if window is not None:
                from console.broker.maintenance import move_line

                steps = tuple(move_line(m) for m in moves) + tuple(e.line() for e in self.evacuated)
                await window.end(self.verdict, outcome, self.progress, steps)


@dataclass
class RestartNodes(Command["list[Restart]"]):
    """Nodes restarted in turn around the operator's own command (console.broker.restart), under the lease:
    each drained, the command run, the node waited for until it is back; the first not safe stops them.
    The command is not recorded (it can name the operator's keys): its exit code is."""

    name, role, changes_server = "maintain.restart", "admin", True
    records = "the nodes in their order; each one's drain, the command's exit, its restart and when it was back"
    nodes: list[str]
    command: str
    time_box: float
    batch_timeout: float
    run_timeout: float
    back_timeout: float
    urls: list[str]
    servers: int  # in the cluster: the lease is replicated on three when there are
    progress: Callable[[str], None] = lambda _: None
    ledger: LedgerReader | None = None  # the loss ledger, read for the restarts' window once they are done
    verdict: LedgerVerdict | None = field(default=None, init=False)

    @property
    def target(self) -> str:
        return ", ".join(self.nodes)

    def said(self, result: list[Restart]) -> str:
        from console.domain.maintenance import restart_line

        text = "; ".join(restart_line(r) for r in result) or "nothing restarted"
        text += f"; {self.verdict.text()}" if self.verdict else ""
        return text if len(text) <= 1000 else text[:999] + "…"

    async def execute(self, services: Services, asker: Asker) -> list[Restart]:
        from console.broker.maintenance import Lease
        from console.broker.restart import rolling

        nc = required(services.connection, "connection")()
        system_nc = services.system_connection() if services.system_connection else None
        lease = await Lease.take(nc, asker.actor.user, ",".join(self.nodes)[:200], replicas=3 if self.servers >= 3 else 1)
        window = await self.ledger.open() if self.ledger is not None else None
        outcome, done = "interrupted", []
        try:
            if window is not None:
                await window.begin("restart", self.nodes, asker.actor.user, self.progress)
            try:
                done = await rolling(nc, system_nc, self.nodes, self.command, time_box=self.time_box,
                                     batch_timeout=self.batch_timeout, run_timeout=self.run_timeout,
                                     back_timeout=self.back_timeout, urls=self.urls, said=self.progress)
            finally:
                await lease.release()
            if window is not None and any(r.moved or r.seen_down for r in done):  # the cluster was touched
                self.verdict = await window.verdict(None, self.progress)
            outcome = self.said(done)
            return done
        finally:
            if window is not None:
                from console.domain.maintenance import restart_line

                await window.end(self.verdict, outcome, self.progress, tuple(restart_line(r) for r in done))


@dataclass
class SaveAlertRule(Command[str]):
    """Add a rule, or replace the one of the same name; its name."""

    name, role, changes_server = "alert_rule.save", "admin", True
    records = "the rule's name"
    text: str
    rule: str = "(not one rule)"  # its name when the text reads as one rule

    @property
    def target(self) -> str:
        return self.rule

    async def execute(self, services: Services, asker: Asker) -> str:
        return required(services.rules, "rules")().write_rule(self.text)


@dataclass
class MuteAlertRule(Command[None]):
    name, role, changes_server = "alert_rule.mute", "operator", True
    records = "the rule's name"
    rule: str
    muted: ClassVar[bool] = True

    @property
    def target(self) -> str:
        return self.rule

    async def execute(self, services: Services, asker: Asker) -> None:
        required(services.rules, "rules")().write_muted(self.rule, self.muted)


class UnmuteAlertRule(MuteAlertRule):
    name, muted = "alert_rule.unmute", False


@dataclass
class RunSearch(Command[tuple[list["Found"], "SearchProgress"]]):
    """A bounded search of any stream; it reads, so read-only allows it. (matches, how it ended)."""

    name, role, changes_server = "search.run", "viewer", False
    records = "the stream and the whole query (filter, window, expression, limits)"
    query: SearchQuery
    progress: Callable[[SearchProgress], None] | None = None
    cancelled: Callable[[], bool] = lambda: False
    on_match: Callable[[Found], None] | None = None

    @property
    def on_stream(self) -> str:
        return self.query.stream

    @property
    def target(self) -> str:
        return bounded(f"{self.query.stream} {json.dumps(self.query.describe(), default=str)}")

    async def execute(self, services: Services, asker: Asker) -> tuple[list[Found], SearchProgress]:
        return await required(services.search, "search")(asker, self.query, self.progress, self.cancelled, self.on_match)


@dataclass
class ExportSearch(Command[Any]):
    """Matches with the query that found them, masked as shown: those a page holds (the file's bytes),
    or, given a path, a search's matches streamed into that file as they are found ((matches, how it
    ended), as RunSearch)."""

    name, role, changes_server = "export.search", "viewer", False
    records = "the stream, the format, how many matches and the query"
    query: SearchQuery
    fmt: str
    matches: list[Found] | None = None
    path: Path | None = None
    progress: Callable[[SearchProgress], None] | None = None

    def __post_init__(self) -> None:
        format_named(self.fmt)
        if (self.matches is None) == (self.path is None):
            raise ValueError("an export of a search is of the matches held or into a file: one of them")

    @property
    def on_stream(self) -> str:
        return self.query.stream

    @property
    def target(self) -> str:
        held = f" {len(self.matches)} matches" if self.matches is not None else f" to {self.path}"
        return bounded(f"{self.query.stream} {self.fmt}{held} {json.dumps(self.query.describe(), default=str)}")

    async def execute(self, services: Services, asker: Asker) -> Any:
        payloads, stream = services.payloads(asker.payloads), self.query.stream
        one = one_decoder(payloads.decoders, stream) if self.fmt == "parquet" else None
        payload_type = one.arrow_type() if one is not None else None
        schema = search_schema(payload_type) if self.fmt == "parquet" else None
        columns = (*SEARCH_COLUMNS, "raw") if payload_type is not None else SEARCH_COLUMNS

        def row(f: Found) -> dict[str, Any]:  # the payload as its stream's decoder reads it, where it has one
            decoded = payloads.decoded(stream, f.subject, f.headers, f.data)
            if payload_type is None:
                return found_row(f, decoded)
            return typed_row(f, decoded, payload_type)

        if self.matches is not None:
            return export_bytes(self.fmt, (row(f) for f in self.matches), columns, self.query.describe(), schema)
        assert self.path is not None
        exporter = Exporter(self.path, self.fmt, self.query.describe(), columns, schema)
        try:
            oldest_first = self.query.direction != "newest"
            found, state = await required(services.search, "search")(asker, self.query, self.progress, lambda: False,
                                                         (lambda f: exporter.write(row(f))) if oldest_first else None)
            if not oldest_first:  # newest first: kept to be ordered, written now
                for f in found:
                    exporter.write(row(f))
            return found, state
        finally:
            exporter.close()


@dataclass
class ExportTable(Command[bytes]):
    """A table as a page shows it (History's, the Audit trail's), in a format of the registry."""

    name, role, changes_server = "export.csv", "viewer", False  # named when CSV was its one format
    records = "the table and the dates"
    table: str
    period: str  # the dates, as the page chose them
    fmt: str
    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str]
    filters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        format_named(self.fmt)

    @property
    def target(self) -> str:
        return f"{self.table} {self.period}" + ("" if self.fmt == "csv" else f" {self.fmt}")

    async def execute(self, services: Services, asker: Asker) -> bytes:
        return export_bytes(self.fmt, self.rows, self.columns, self.filters)


@dataclass
class ExportReport(Command[str]):
    """One incident as a Markdown report."""

    name, role, changes_server = "export.report", "viewer", False
    records = "the incident's batch"
    batch_id: str
    stream: str | None
    report: Callable[[], str]

    @property
    def target(self) -> str:
        return self.batch_id

    @property
    def on_stream(self) -> str | None:
        return self.stream

    async def execute(self, services: Services, asker: Asker) -> str:
        return self.report()


def as_file(content: bytes | str) -> io.BytesIO:
    return io.BytesIO(content.encode() if isinstance(content, str) else content)


LEAST_ROLE = {name: cls.role for name, cls in COMMANDS.items()}
