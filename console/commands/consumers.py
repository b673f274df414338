"""Commands on a consumer: pause, resume, reset, unpin, delete."""

from __future__ import annotations

from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from console.commands.base import Asker, Command, Services, T, required

if TYPE_CHECKING:
    from console.broker.consumers import ConsumerAdmin
    from console.domain.consumer_lag import ConsumerRead


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
