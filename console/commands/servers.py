"""Commands that change a server: a stream's batch settings, a probe's batches, a canary round, a node's
drain and restart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from console.domain.maintenance import MOVE_TIMEOUT
from console.commands.base import Asker, Command, Services, required

if TYPE_CHECKING:
    from console.broker.eventlog import EventLog
    from console.canary import CanaryOptions, CanaryRun
    from console.domain.stream_settings import StreamBatchSettings
    from console.broker.evacuate import Evacuated
    from console.broker.maintenance import Move
    from console.broker.maintenance_ledger import LedgerReader
    from console.domain.ledger_verdict import LedgerVerdict
    from console.domain.maintenance import Restart
    from console.domain.maintenance import Plan
    from console.probe import ProbeOptions, ProbeReport


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
