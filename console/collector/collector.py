"""The collector: advisories (captured durably by a stream) and the `$FI` reply tap -> the event log.

An advisory is acked only after the event log has acknowledged its event, and the event log
deduplicates on the event id, so a crash between the two loses nothing and duplicates nothing.
Bad input (anything a parser refuses) is permanent: counted by reason, kept in the quarantine,
acked and skipped, so it never holds back what comes behind it. NATS being unavailable is
transient: retried with backoff. Every loop is supervised: one that fails is logged, counted in
the status, and started again.

Its parts, each with one job: the readers (AdvisoryReader, TapReader, CaptureWatch) put what they
read into the Intake; BatchState holds the open batches; EventWriter stores; StatusReport tells.
This class only makes them, starts them in order and stops them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace

from console.broker.capture import Subscriptions
from console.broker.connection import Connection, flush, identity
from console.broker.eventlog import EventLog
from console.broker.quarantine import Quarantine, QuarantineSettings
from console.broker.server_info import DEFAULT_BATCH_TIMEOUT, own_account, read_varz
from console.collector.advisory_reader import AdvisoryReader
from console.collector.capture_watch import CaptureWatch
from console.collector.grading import Grading
from console.collector.health import Health, Loops
from console.collector.intake import Intake
from console.collector.priority import CpuMode, CpuPriority
from console.collector.publishers import Publishers
from console.collector.atomic_watch import AtomicWatch
from console.collector.state import BatchState
from console.domain.fast_tracker import FastBatchTracker
from console.collector.status import StatusReport
from console.collector.tap_reader import TapReader
from console.collector.writer import EventWriter
from console.config import CollectorSettings, EventLogSettings
from console.domain.batch_limits import BatchLimits
from console.domain.events import COLLECTOR, BatchEvent
from console.domain.status import CollectorStatus
from console.domain.wire import Tally

log = logging.getLogger(__name__)

STOP_GRACE = 10.0  # seconds a stop may spend handling what was received and storing what is queued


async def _ended(tasks: list[asyncio.Task[None]]) -> None:
    if tasks:
        _, stuck = await asyncio.wait(tasks, timeout=STOP_GRACE + 5)
        for task in stuck:
            log.error("stopping: %s did not end", task.get_name())


class Collector:
    def __init__(self, nc: Connection, settings: CollectorSettings = CollectorSettings(),
                 event_log: EventLogSettings = EventLogSettings(), system_nc: Connection | None = None,
                 monitor_url: str | None = None, quarantine: QuarantineSettings = QuarantineSettings()):
        """system_nc: a connection to the system account, for its copies of every account's
        advisories and for /varz; monitor_url: the server's monitoring URL, for /varz. Both optional."""
        self.nc, self.system_nc, self.settings, self.monitor_url = nc, system_nc, settings, monitor_url
        self._stopping = False
        stopping = lambda: self._stopping  # noqa: E731: every loop ends on it (see stop())
        self.errors = Tally()  # transient failures the collector survived
        self.loops = Loops(self.errors)
        self.health = Health()
        self.log = EventLog.over(nc, event_log)
        self.quarantine = Quarantine(nc, replace(quarantine, replicas=quarantine.replicas or event_log.replicas))
        self.publishers = Publishers(system_nc, None, errors=self.errors, shared_prefixes=settings.inbox_prefixes,
                                     own=lambda: identity(nc))
        self.rejected = Tally()
        self.writer = EventWriter(self.log, self.quarantine, self.publishers, self.health, self.rejected, self.errors,
                                  settings.max_queued_events)
        self.state = BatchState(nc, settings.batch_timeout or DEFAULT_BATCH_TIMEOUT,
                                "configured" if settings.batch_timeout else "assumed (server default)",
                                settings.max_tracked_batches, self.errors)
        self.intake = Intake(self.writer, self.state, self.quarantine, self.rejected)
        self._subs = Subscriptions()
        own_streams = frozenset((event_log.stream, settings.advisory_stream, quarantine.stream))
        self.advisories = AdvisoryReader(nc, system_nc, settings, event_log.replicas, own_streams, self.intake,
                                         self.writer, self.loops, self.errors, stopping)
        self.report_instance = uuid.uuid4().hex[:12]
        self.grading = None if settings.no_conformance else \
            Grading(self.publishers, self.report_instance, settings.batch_timeout or DEFAULT_BATCH_TIMEOUT,
                    settings.status_every)
        self.taps = TapReader(nc, settings, self.intake, self.publishers, self._subs, self.loops, self.errors,
                              stopping, self.grading)
        self.cpu = CpuPriority(CpuMode(settings.cpu)) if settings.cpu else None
        self.report = StatusReport(nc, self.advisories, self.taps, self.state, self.writer, self.quarantine,
                                   self.publishers, self.loops, self.health, self.errors, self.cpu,
                                   instance=self.report_instance)
        self.capture = CaptureWatch(nc, self.report.instance, lambda: self.advisories.stream,
                                    lambda events: self.intake.put(events, COLLECTOR), lambda: self.loops.beat("capture"))
        self._writer: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # What tests and the status page ask of the collector by name.
    @property
    def tracker(self) -> FastBatchTracker:
        return self.state.tracker

    @property
    def atomic(self) -> AtomicWatch:
        return self.state.atomic

    @property
    def tapped(self) -> int:
        return self.taps.tapped

    @property
    def ignored(self) -> Tally:
        return self.intake.ignored

    @property
    def problems(self) -> list[str]:
        return self.report.problems

    @property
    def advisories_durable(self) -> bool:
        return self.advisories.durable

    @property
    def batch_timeout_source(self) -> str:
        return self.state.batch_timeout_source

    @property
    def advisory_stream(self) -> str | None:
        return self.advisories.stream

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.cpu is not None:
            self.cpu.apply()
        self.report.notes[:] = await self.log.ensure()
        for note in self.report.notes:
            log.info("event log: %s", note)
        await self.quarantine.ensure()
        await self._learn_batch_timeout()
        self.publishers.account = self.advisories.account = await own_account(self.nc) if self.system_nc is not None \
            else None
        reading = [await self.advisories.start(self._subs), await self.taps.start()]
        if self.advisories.problem:
            self.report.problems.append(self.advisories.problem)
        await flush(self.nc)  # started means tapping: the server has every subscription
        self._writer = self.loops.start("writer", self.writer.run, lambda: self._stopping)
        self.loops.forget("writer")  # it waits for work; stuck writes are what Health watches
        self._tasks += [task for task in reading if task is not None]
        self._tasks.append(self.loops.start("ticker", self._tick_loop, lambda: self._stopping))
        self._tasks.append(self.loops.start(
            "streams", lambda: self.state.stream_event_loop(self.intake.put, lambda: self._stopping,
                                                            lambda: self.loops.beat("streams")),
            lambda: self._stopping))
        self._tasks.append(self.loops.start("capture", lambda: self.capture.run(lambda: self._stopping),
                                            lambda: self._stopping))

    async def stop(self) -> None:
        """Take no more input, handle what the server already sent, store every queued event, end.

        Every loop also ends on the `_stopping` flag: nats-py can swallow a cancellation (its fetch
        turns one into a TimeoutError; a publish whose reply lands in the same pass returns normally),
        and a task that missed its cancel would keep stop() waiting for ever.
        """
        self._stopping = True
        self.writer.stop_deadline = time.monotonic() + STOP_GRACE
        await self._subs.drain(STOP_GRACE)  # the replies the server sent before the unsubscribe are handled
        for task in self._tasks:
            task.cancel()
        await _ended(self._tasks)
        self._tasks.clear()
        if self.grading is not None:
            self.grading.tick(self.intake.put, everything=True)
        if self._writer is not None:
            await self.writer.end()  # only now: nothing else can enqueue
            await _ended([self._writer])
            self._writer = None

    def note_connection_error(self, error: Exception) -> None:
        """For the connection's error callback: a denied subscription becomes a visible problem."""
        text = str(error)
        if "permissions violation" in text.lower() and text not in self.problems:
            self.problems.append(text)
            log.warning("%s: running with what is allowed", text)

    async def _learn_batch_timeout(self) -> None:
        if self.settings.batch_timeout:
            return
        if (found := await read_varz(self.system_nc, self.monitor_url)) is not None:  # else the default, assumed
            varz, source = found
            limits = BatchLimits.from_varz(varz)
            self.state.learn_batch_timeout(limits.timeout, source)
            if self.grading is not None:
                size = limits.get("max_batch_size").atomic
                self.grading.grader.learn(limits.timeout, int(size) if size else None)

    async def _tick_loop(self) -> None:
        last_status = 0.0
        while not self._stopping:
            self.loops.beat("ticker")
            due = time.monotonic() + self.settings.tick_every
            await asyncio.sleep(self.settings.tick_every)
            if self.cpu is not None:
                clock = time.monotonic()
                self.cpu.on_tick(clock - due, clock)
            self.state.tick(self.intake.put)
            if self.grading is not None:
                self.grading.tick(self.intake.put)
            if time.monotonic() - last_status >= self.settings.status_every:
                last_status = time.monotonic()
                await self.heartbeat()

    async def heartbeat(self) -> None:
        """Write a status now (it goes out every status_every seconds on its own)."""
        self.intake.put([await self.report.event()], COLLECTOR)

    async def status_event(self) -> BatchEvent:
        return await self.report.event()

    async def status(self) -> CollectorStatus:
        return await self.report.status()
