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
import math
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Awaitable, Callable

from console.broker.admin import list_streams
from console.broker.capture import Subscriptions, stream_cluster
from console.broker.connection import Connection, close, connected_to, flush, identity, unread
from console.broker.eventlog import EventLog
from console.broker.quarantine import Quarantine, QuarantineSettings
from console.broker.server_info import clusters_of, own_account, read_varz
from console.collector.advisory_reader import AdvisoryReader
from console.collector.capture_watch import CaptureWatch
from console.collector.copy_watch import CopyWatch
from console.collector.grading import Grading
from console.collector.health import Health, Loops
from console.collector.intake import Intake
from console.collector.kept import WAIT_AT_MOST, KeptMessages
from console.collector.priority import BEHIND_BYTES, CpuMode, CpuPriority
from console.collector.publishers import Publishers
from console.collector.atomic_watch import AtomicWatch
from console.collector.state import BatchState, now
from console.domain.fast_tracker import FastBatchTracker
from console.collector.status import StatusReport
from console.collector.tap_reader import TapReader
from console.collector.writer import EventWriter
from console.config import CollectorSettings, EventLogSettings
from console.domain.atomic_tracker import KEPT_PAST_TIMEOUT
from console.domain.batch_limits import BatchLimits
from console.domain.budgets import totals_events
from console.domain.events import COLLECTOR, PUBLISH_TAP, BatchEvent
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
                 monitor_url: str | None = None, quarantine: QuarantineSettings = QuarantineSettings(),
                 open_tap: Callable[[list[str]], Awaitable[Connection]] | None = None,
                 kept: KeptMessages | None = None):
        """system_nc: a connection to the system account, for its copies of every account's
        advisories and for /varz; monitor_url: the server's monitoring URL, for /varz. Both optional.
        open_tap: a connection as this one to other servers (the account's user): in a supercluster the
        collector taps `$FI` replies in each cluster through one (the system account names the clusters).
        kept: what keeps a lost batch's first and last messages (the publish side tapped), masked by the
        operator's rules."""
        self.nc, self.system_nc, self.settings, self.monitor_url = nc, system_nc, settings, monitor_url
        self._open_tap = open_tap
        self._tap_connections: list[Connection] = []
        self._stream_clusters: dict[str, tuple[float, str | None]] = {}
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
        self.state = BatchState(nc, settings.batch_timeout_or_default,
                                "configured" if settings.batch_timeout else "assumed (server default)",
                                settings.max_tracked_batches, self.errors)
        self.intake = Intake(self.writer, self.state, self.quarantine, self.rejected, kept)
        self.intake.kept.tapped = self.intake.kept.tapped or bool(settings.tap_publish_subjects)
        self._subs = Subscriptions()
        own_streams = frozenset((event_log.stream, settings.advisory_stream, quarantine.stream))
        self.advisories = AdvisoryReader(nc, system_nc, settings, event_log.replicas, own_streams, self.intake,
                                         self.writer, self.loops, self.errors, stopping)
        self.report_instance = uuid.uuid4().hex[:12]
        self._totals: asyncio.Task[None] | None = None
        self.grading = None if settings.no_conformance else \
            Grading(self.publishers, self.report_instance, settings.batch_timeout_or_default,
                    settings.status_every, self._subs.first_unhanded)
        self.taps = TapReader(nc, settings, self.intake, self.publishers, self._subs, self.loops, self.errors,
                              stopping, self.grading)
        self.cpu = CpuPriority(CpuMode(settings.cpu)) if settings.cpu else None
        self._tick_due = math.inf  # when the ticker is next due (the CPU watcher reads it from its thread)
        self.report = StatusReport(nc, self.advisories, self.taps, self.state, self.writer, self.quarantine,
                                   self.publishers, self.loops, self.health, self.errors, self.cpu,
                                   instance=self.report_instance)
        self.capture = CaptureWatch(nc, self.report.instance, lambda: self.advisories.stream,
                                    lambda events: self.intake.put(events, COLLECTOR), lambda: self.loops.beat("capture"),
                                    self.state.tracker.not_heard)
        self.copies = CopyWatch(nc, settings.domains, lambda events: self.intake.put(events, COLLECTOR),
                                lambda: self.loops.beat("copies")) if settings.domains else None
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
            self.cpu.apply(due=lambda: self._tick_due, behind=self._taps_behind)
        self.report.notes[:] = await self.log.ensure()
        for note in self.report.notes:
            log.info("event log: %s", note)
        await self.quarantine.ensure()
        await self._learn_batch_timeout()
        self.publishers.account = self.advisories.account = await own_account(self.nc) if self.system_nc is not None \
            else None
        await self._tap_every_cluster()
        # The taps first, in place on the server: whoever sees the advisory consumer (what tests and `up` wait
        # on) may publish at once, and a fast batch published before its tap was there would never be seen
        tapping = await self.taps.start()
        await flush(self.nc)
        reading = [tapping, *await self.advisories.start(self._subs)]
        if self.advisories.problem:
            self.report.problems.append(self.advisories.problem)
        await flush(self.nc)  # started means reading: the server has every subscription
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
        if (copies := self.copies) is not None:  # a leaf's batches followed into their copies here
            self._tasks.append(self.loops.start("copies", lambda: copies.run(lambda: self._stopping),
                                                lambda: self._stopping))

    async def _tap_every_cluster(self) -> None:
        """In a supercluster, a tap connection in each cluster, all in one queue group of this collector: the
        server hands each `$FI` reply to the tap in its own cluster, so none crosses a gateway to be heard."""
        if self.system_nc is None or self._open_tap is None:
            return
        try:
            clusters = await clusters_of(self.system_nc)
        except Exception as e:  # an older server, no permission: one tap, as on one cluster
            self.errors.add(f"clusters: {type(e).__name__}")
            return
        if len(clusters) < 2:
            return
        here = connected_to(self.nc)
        own = next((name for name, urls in clusters.items() if here in urls), None)
        taps: dict[str, Connection] = {}
        for name, urls in clusters.items():
            if name == own:
                taps[name] = self.nc
                continue
            try:
                taps[name] = connection = await self._open_tap(urls)
                self._tap_connections.append(connection)
            except Exception as e:  # that cluster's replies reach the others' taps over the gateway
                log.warning("supercluster: no tap in cluster %s (%s): its replies cross the gateway", name, e)
                self.errors.add(f"cluster tap: {type(e).__name__}")
        if own is None:  # this connection's server answered under no cluster's URL: its taps go elsewhere
            log.warning("supercluster: this connection's cluster not found among %s", ", ".join(clusters))
        self.taps.clusters, self.taps.queue = taps, f"batch_console_tap_{self.report_instance}"
        self.advisories.cluster_of = self._cluster_of
        log.info("supercluster: clusters %s, a $FI tap in each", ", ".join(sorted(taps)))

    async def _cluster_of(self, stream: str) -> str | None:
        """The cluster a stream is placed in, kept a minute (a stream moved by its placement is seen again)."""
        known = self._stream_clusters.get(stream)
        if known is None or time.monotonic() - known[0] > 60.0:
            try:
                known = (time.monotonic(), await stream_cluster(self.nc, stream))
            except Exception as e:  # gone, or not answering: the event is kept without its cluster
                self.errors.add(f"stream cluster: {type(e).__name__}")
                return None
            if len(self._stream_clusters) >= 10_000:
                self._stream_clusters.pop(next(iter(self._stream_clusters)))
            self._stream_clusters[stream] = known
        return known[1]

    async def stop(self) -> None:
        """Take no more input, handle what the server already sent, store every queued event, end.

        Every loop also ends on the `_stopping` flag: nats-py can swallow a cancellation (its fetch
        turns one into a TimeoutError; a publish whose reply lands in the same pass returns normally),
        and a task that missed its cancel would keep stop() waiting for ever.
        """
        self._stopping = True
        if self.cpu is not None:
            self.cpu.for_stop()
        self.writer.stop_deadline = time.monotonic() + STOP_GRACE
        await self._subs.drain(STOP_GRACE)  # the replies the server sent before the unsubscribe are handled
        for task in self._tasks:
            task.cancel()
        await _ended(self._tasks + ([self._totals] if self._totals is not None else []))
        self._tasks.clear()
        if self.grading is not None:
            self.grading.tick(self.intake.put, everything=True)
        if kept := self.intake.kept.tick(now() + WAIT_AT_MOST, timedelta(days=1)):  # the losses still kept back
            self.intake.put(kept, PUBLISH_TAP)
        if self._writer is not None:
            await self.writer.end()  # only now: nothing else can enqueue
            await _ended([self._writer])
            self._writer = None
        await self.quarantine.settled()
        for connection in self._tap_connections:
            await close(connection)
        self._tap_connections.clear()

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

    async def _write_totals(self) -> None:
        """The streams' last sequences and the atomic batches seen open: what loss budgets count by."""
        try:
            streams, _ = await list_streams(self.nc)
        except Exception as e:  # the next one counts what this one missed: totals are cumulative
            self.errors.add(f"stream totals: {type(e).__name__}")
            return
        last_seqs = {s.settings.name: s.last_seq for s in streams if s.last_seq is not None}
        atomic = self.state.atomic
        atomic.tally.settle(self._atomic_publisher, now())
        self.intake.put(totals_events(self.report_instance, now(), last_seqs, atomic.tracker.started,
                                      atomic.tally.counts), COLLECTOR)

    def _atomic_publisher(self, batch_id: str, reply: str) -> str | None:
        """Who sent an atomic batch, as objectives name a publisher; "" when no one can be known, None while
        the servers are still asked."""
        prefix = reply.rsplit(".", 1)[0]
        if self.publishers.asking("atomic", prefix, batch_id):
            return None
        found = self.publishers.lookup("atomic", prefix, batch_id)
        return "" if found is None else found.budget_key()

    def _taps_behind(self) -> bool:
        """Whether a tap connection has far more from the server than it has read (BEHIND_BYTES, or half its
        receive buffer, which the kernel keeps small for a reader that never kept up): behind a flood."""
        for nc in self.taps.connections():
            if (found := unread(nc)) is not None and found[0] >= min(BEHIND_BYTES, found[1] // 2):
                return True
        return False

    async def _tick_loop(self) -> None:
        # The first totals a period after the start: they are a baseline, and in a supercluster the stream
        # list crosses a gateway (measured in tests/integration/test_supercluster.py)
        last_status, last_totals = 0.0, time.monotonic()
        while not self._stopping:
            self.loops.beat("ticker")
            self._tick_due = time.monotonic() + self.settings.tick_every  # how late it runs: the CPU's watcher
            await asyncio.sleep(self.settings.tick_every)
            self._tick_due = math.inf  # its work is no lateness
            self.state.tick(self.intake.put)
            if kept := self.intake.kept.tick(now(), timedelta(seconds=self.state.tracker.batch_timeout +
                                                             KEPT_PAST_TIMEOUT)):
                self.intake.put(kept, PUBLISH_TAP)
            if self.grading is not None:
                self.grading.tick(self.intake.put)
            if self.settings.totals_every and time.monotonic() - last_totals >= self.settings.totals_every \
                    and (self._totals is None or self._totals.done()):
                last_totals = time.monotonic()
                self._totals = asyncio.create_task(self._write_totals())
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
