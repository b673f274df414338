"""The collector's status: what it has read, written, refused and survived, and whether it is
healthy; written to the event log every status_every seconds, where every part of the console reads it."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from console.broker.audit_log import Witness
from console.broker.connection import Connection, is_connected, not_utf8
from console.broker.nats_internals import fast_paths
from console.broker.quarantine import Quarantine
from console.collector.advisory_reader import AdvisoryReader
from console.collector.health import Health, Loops
from console.collector.priority import CpuPriority
from console.collector.publishers import Publishers
from console.collector.state import BatchState, now
from console.collector.tap_reader import TapReader
from console.collector.writer import EventWriter
from console.domain.events import BatchEvent, EventKind
from console.domain.status import CollectorStatus
from console.domain.wire import Tally


NOT_UTF8_REASON = "subject not UTF-8 (read with U+FFFD)"


@dataclass
class StatusReport:
    nc: Connection
    advisories: AdvisoryReader
    taps: TapReader
    state: BatchState
    writer: EventWriter
    quarantine: Quarantine
    publishers: Publishers
    loops: Loops
    health: Health
    errors: Tally
    cpu: CpuPriority | None
    problems: list[str] = field(default_factory=list)  # permission errors and the like, shown by the UI
    notes: list[str] = field(default_factory=list)  # how an existing event log differs from what it would create
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # the collector's, shared with its grading
    started: float = field(default_factory=time.monotonic)
    _seq: int = 0
    audit: Witness = field(default_factory=Witness)  # the audit trail's head, a witness outside it

    async def event(self) -> BatchEvent:
        self._seq += 1
        return BatchEvent(f"status.{self.instance}.{self._seq}", EventKind.COLLECTOR_STATUS, now(),
                          detail=(await self.status()).to_json())

    async def status(self) -> CollectorStatus:
        lag = await self.advisories.lag()
        audit_seq, audit_hash = await self.audit.observe(self.nc)
        clock = time.monotonic()
        unhealthy = self.health.verdict(clock, lag, self.loops.stale(clock), self.writer.queued)
        intake, tracker = self.taps.intake, self.state.tracker
        rejected = dict(intake.rejected)
        if repaired := sum(not_utf8(nc) for nc in self.taps.connections()):  # read, and refused by their readers' checks
            rejected[NOT_UTF8_REASON] = repaired
        return CollectorStatus(
            instance=self.instance, alive_s=round(clock - self.started, 1), connected=is_connected(self.nc),
            healthy=not unhealthy, unhealthy=tuple(unhealthy), events_written=self.writer.events_written,
            replies_tapped=self.taps.tapped, duplicates=self.writer.duplicates, rejected=rejected,
            errors=dict(self.errors), ignored=dict(intake.ignored), quarantined=self.quarantine.kept,
            not_quarantined=self.quarantine.not_kept, advisory_lag=lag, advisories_durable=self.advisories.durable,
            batches_tracked=len(tracker.batches), batches_untracked=tracker.untracked,
            batches_not_graded=self.taps.grading.grader.not_graded if self.taps.grading else 0,
            batches_refused_by_prefix=dict(tracker.refused), unsaid_by_prefix=dict(tracker.unsaid),
            batch_timeout=tracker.batch_timeout,
            batch_timeout_source=self.state.batch_timeout_source, queued=self.writer.queued,
            problems=(*self.problems, *self.advisories.domain_problems.values()), notes=tuple(self.notes), loops=self.loops.status(),
            cpu=self.cpu.status() if self.cpu else None, publishers_known=self.publishers.known,
            connz_requests=self.publishers.requests, publisher_note=self.publishers.note,
            audit_seq=audit_seq, audit_hash=audit_hash,
            fast_paths_off=tuple(sorted({f"{path}: {why}" for nc in (self.nc, *self.taps.connections())
                                         for path, why in fast_paths(nc).items() if why})),
        )
