"""The collector: advisories (captured durably by a stream) and the `$FI` reply tap -> the event log.

An advisory is acked only after the event log has acknowledged its event, and the event log
deduplicates on the event id, so a crash between the two loses nothing and duplicates nothing.
Bad input (anything a parser refuses) is permanent: counted by reason, kept in the quarantine,
acked and skipped, so it never holds back what comes behind it. NATS being unavailable is
transient: retried with backoff. Every loop is supervised: one that fails is logged, counted in
the status, and started again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from console.broker.eventlog import EventLog
from console.broker.quarantine import Quarantine, QuarantineSettings
from console.broker.capture import (
    ABANDONED_SUBJECTS,
    ADVISORY_SUBJECTS,
    LEADER_ELECTIONS,
    DurableAdvisories,
    Inbound,
    Subscriptions,
    stream_of_subject,
)
from console.broker.connection import Connection
from console.broker.server_info import DEFAULT_BATCH_TIMEOUT, own_account, read_varz
from console.collector.atomic_watch import AtomicWatch
from console.collector.capture_watch import CaptureWatch
from console.collector.health import Health, Loops
from console.collector.priority import CpuMode, CpuPriority
from console.collector.publishers import Publishers
from console.collector.writer import EventWriter, survive
from console.config import CollectorSettings, EventLogSettings
from console.domain.advisory_events import IgnoredAdvisory, advisory_to_event
from console.domain.batch_limits import BatchLimits
from console.domain.events import (
    ACCOUNT_ADVISORY,
    COLLECTOR,
    FI_TAP,
    PUBLISH_TAP,
    SYSTEM_ADVISORY,
    BatchEvent,
    EventKind,
    elected_leader,
)
from console.domain.fast_tracker import FastBatchTracker
from console.domain.status import CollectorStatus
from console.domain.wire import MalformedInput, Tally
from console.errors import CaptureRefusedError

log = logging.getLogger(__name__)

STOP_GRACE = 10.0  # seconds a stop may spend handling what was received and storing what is queued
# Seconds an account-side abandonment waits for the system account's copy (they arrive together).
VERIFY_WAIT = 2.0
# How far ahead of this clock an advisory's timestamp may be (clock drift between hosts); later is forged.
FUTURE_SKEW = timedelta(minutes=5)


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def _ended(tasks: list[asyncio.Task]) -> None:
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
        self.nc = nc
        self.system_nc = system_nc
        self.settings = settings
        self.monitor_url = monitor_url
        self.log = EventLog(nc.jetstream(), event_log)
        self.advisories = DurableAdvisories(nc, settings.advisory_stream, settings.durable, settings.advisory_max_age,
                                            settings.ack_wait, event_log.replicas)
        self.tracker = FastBatchTracker(settings.batch_timeout or DEFAULT_BATCH_TIMEOUT, settings.max_tracked_batches)
        self.batch_timeout_source = "configured" if settings.batch_timeout else "assumed (server default)"
        self._streams_by_subject: dict[str, str | None] = {}
        self.instance = uuid.uuid4().hex[:12]
        self.quarantine = Quarantine(nc, replace(quarantine, replicas=quarantine.replicas or event_log.replicas))
        self._own_streams = frozenset((event_log.stream, settings.advisory_stream, quarantine.stream))
        self.rejected = Tally()  # bad input, by reason: counted, quarantined, skipped
        self.ignored = Tally()
        self.errors = Tally()  # transient failures the collector survived
        self.problems: list[str] = []  # permission errors and the like, shown by the UI
        self.notes: list[str] = []  # how an existing event log differs from what the console would create
        self._from_system: dict[str, None] = {}  # ids of advisories the system account sent (bounded, ordered)
        self.loops = Loops(self.errors)
        self.health = Health()
        self.tapped = 0  # $FI replies received
        self._last_tap = 0.0
        self.advisories_durable = False
        self.advisory_stream: str | None = None
        self._writer: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._subs = Subscriptions()
        self._status_seq = 0
        self._started = time.monotonic()
        self._stopping = False
        self.cpu = CpuPriority(CpuMode(settings.cpu)) if settings.cpu else None
        self.atomic = AtomicWatch(nc, settings.batch_timeout or DEFAULT_BATCH_TIMEOUT, settings.max_tracked_batches,
                                  self.errors)
        self._stream_events: asyncio.Queue[BatchEvent] = asyncio.Queue(10_000)
        self.capture = CaptureWatch(nc, self.instance, lambda: self.advisory_stream,
                                    lambda events: self._enqueue(events, COLLECTOR), lambda: self.loops.beat("capture"))
        self.publishers = Publishers(system_nc, None, errors=self.errors)
        self.writer = EventWriter(self.log, self.quarantine, self.publishers, self.health, self.rejected, self.errors,
                                  settings.max_queued_events)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.cpu is not None:
            self.cpu.apply()
        self.notes = await self.log.ensure()
        for note in self.notes:
            log.info("event log: %s", note)
        await self.quarantine.ensure()
        await self._learn_batch_timeout()
        self.publishers.account = await own_account(self.nc) if self.system_nc is not None else None
        await self._start_advisories()
        if self.system_nc is not None:  # every account's advisories, which no client can forge
            await self._subs.follow(self.system_nc, ADVISORY_SUBJECTS, self._on_system_advisory)
        # Live, before the tap: an election reaches us ahead of the refusals it causes (the new
        # leader sends both, in that order), while the durable capture may lag it.
        await self._subs.follow(self.nc, LEADER_ELECTIONS, self._on_election)
        for prefix in self.settings.inbox_prefixes:
            await self._subs.tap_fast_replies(self.nc, prefix, self._on_tap)
        for subject in self.settings.tap_publish_subjects:
            await self._subs.follow(self.nc, subject, self._on_publish_side)
        await self.nc.flush()  # started means tapping: the server has every subscription
        self._writer = self.loops.start("writer", self.writer.run, lambda: self._stopping)
        self.loops.forget("writer")  # it waits for work; stuck writes are what Health watches
        self._tasks.append(self.loops.start("ticker", self._tick_loop, lambda: self._stopping))
        self._tasks.append(self.loops.start("streams", self._stream_event_loop, lambda: self._stopping))
        if self.settings.pace_ms > 0:
            self._tasks.append(self.loops.start("pacer", self._pace_loop, lambda: self._stopping))
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
            varz, self.batch_timeout_source = found
            self.tracker.batch_timeout = BatchLimits.from_varz(varz).timeout

    # -- advisories ------------------------------------------------------------------------

    async def _start_advisories(self) -> None:
        try:
            self.advisory_stream = await self.advisories.open()
            self.advisories_durable = True
            self._tasks.append(self.loops.start("advisories", self._advisory_loop, lambda: self._stopping))
            # Abandonments live as well: while the advisory stream has no leader (its node lost, say)
            # the server stores none, and only a subscriber hears them. Both copies carry one id.
            await self._subs.follow(self.nc, ABANDONED_SUBJECTS, self._on_account_live_abandonment)
        except CaptureRefusedError as e:
            self.problems.append(f"advisories are live-only (not durable): cannot capture them in a stream: {e}")
            log.warning(self.problems[-1])
            await self._subs.follow(self.nc, ADVISORY_SUBJECTS, self._on_account_live_advisory)

    async def _advisory_loop(self) -> None:
        while not self._stopping:
            try:
                fetched = await self.advisories.fetch(self.settings.fetch_batch, timeout=1.0)
            except Exception as e:  # reconnecting, or anything else: never stop collecting
                await survive(self.errors, "advisory fetch", e)
                continue
            self.loops.beat("advisories")
            if not fetched:
                continue
            events = [e for msg, _ in fetched if (e := await self._advisory_event(msg)) is not None]
            self._learn(events)
            if not await self.writer.store(await self._account_side(events)):
                continue  # a stop gave up on the log: unacked, they are redelivered to the next run
            for _, ack in fetched:  # only now: the events are in the log
                try:
                    await ack()
                except Exception as e:  # unacked: redelivered after ack_wait, deduplicated by id
                    await survive(self.errors, "advisory ack", e)

    async def _reject(self, source: str, reason: str, msg: Inbound) -> None:
        """Bad input: counted by reason, kept in the quarantine, skipped."""
        self.rejected.add(f"{source}: {reason}")
        await self.quarantine.offer(source, reason, msg.subject, msg.data)

    async def _advisory_event(self, msg: Inbound) -> BatchEvent | None:
        try:
            event = advisory_to_event(msg.data)
            if event.kind is EventKind.CONTEXT and event.stream in self._own_streams:
                # The console's own readers' consumers: no context for a batch, and kept they would wake
                # `analytics --follow`, whose reads make more of them.
                raise IgnoredAdvisory("the console's own streams")
            if event.time > _now() + FUTURE_SKEW:  # no server sent this: it would skew every time window
                raise MalformedInput(f"timestamp in the future ({event.time:%Y-%m-%d %H:%M:%S}Z)")
            return event
        except MalformedInput as e:
            await self._reject("advisory", e.reason, msg)
        except IgnoredAdvisory as e:
            self.ignored.add(e.kind)
        except Exception as e:  # a bug meeting odd input: the input is skipped, never the loop
            log.exception("advisory not readable")
            await self._reject("advisory", f"unreadable ({type(e).__name__})", msg)
        return None

    async def _on_election(self, msg: Inbound) -> None:
        """Only for the tracker; the durable capture stores the advisory (and counts it if it is bad)."""
        try:
            event = advisory_to_event(msg.data)
        except (MalformedInput, IgnoredAdvisory):
            return
        if elected_leader(event) is not None:
            self.tracker.leader_elected(event.stream, _now())  # the tap's clock: the refusals are timed by it

    async def _on_system_advisory(self, msg: Inbound) -> None:
        """The system account's copy: no client of the application account can publish it."""
        if (event := await self._advisory_event(msg)) is not None:
            self._from_system[event.event_id] = None
            while len(self._from_system) > 10_000:
                self._from_system.pop(next(iter(self._from_system)))
            self._enqueue([event], SYSTEM_ADVISORY)

    async def _on_account_live_abandonment(self, msg: Inbound) -> None:
        """The account's live copy, beside the stream's: stored only where no other copy may come (with
        system access, the system account's live copy is the one, unless its connection is down)."""
        if self.system_nc is not None and self.system_nc.is_connected:
            return
        try:  # bad input is counted and quarantined once, from the stream's copy
            event = advisory_to_event(msg.data)
        except (MalformedInput, IgnoredAdvisory):
            return
        except Exception:  # a bug meeting odd input: the stream's copy says so
            return
        if event.time <= _now() + FUTURE_SKEW:
            self._enqueue([replace(event, unverified=self.system_nc is not None)], ACCOUNT_ADVISORY)

    async def _on_account_live_advisory(self, msg: Inbound) -> None:
        if (event := await self._advisory_event(msg)) is not None:
            self._enqueue([event], ACCOUNT_ADVISORY)

    async def _account_side(self, events: list[BatchEvent]) -> list[BatchEvent]:
        """The account's copies, from the advisory stream. With system access, an abandonment the
        system account has not sent within VERIFY_WAIT is kept, marked unverified; one it has sent
        is already stored from there."""
        events = [replace(e, source=ACCOUNT_ADVISORY) for e in events]
        if self.system_nc is None:
            return events

        def pending() -> set[str]:
            return {e.event_id for e in events
                    if e.kind is EventKind.ATOMIC_ABANDONED and e.event_id not in self._from_system}

        deadline = time.monotonic() + VERIFY_WAIT
        while pending() and time.monotonic() < deadline and not self._stopping:
            await asyncio.sleep(0.05)
        unverified = pending()  # what the system account sent is stored from there: skipped here
        return [replace(e, unverified=e.event_id in unverified) for e in events if e.event_id not in self._from_system]

    # -- the $FI tap -----------------------------------------------------------------------

    async def _pace_loop(self) -> None:
        while not self._stopping:
            self.loops.beat("pacer")
            # "Recently", not "since my last pass": after sleep(0) this task resumes before the
            # reads that arrived during the pause have been handled.
            # Never while events wait to be written: a loss must reach the log at once.
            if time.monotonic() - self._last_tap < 0.1 and self.writer.queued == 0:
                time.sleep(self.settings.pace_ms / 1000)  # deliberate: see CollectorSettings.pace_ms
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(0.05)

    async def _on_tap(self, msg: Inbound) -> None:
        self.tapped += 1
        self._last_tap = time.monotonic()
        try:
            if msg.no_responders:  # no stream answered: a lost message of a tracked batch, else nothing
                events = self.tracker.no_responders(msg.subject, _now())
                if not events:
                    self.ignored.add("no responders")
            else:
                events = self.tracker.observe(msg.subject, msg.data, _now())
        except MalformedInput as e:
            await self._reject(FI_TAP, e.reason, msg)
            return
        except Exception as e:  # a bug meeting odd input: the input is skipped, never the tap
            log.exception("tapped reply not readable")
            await self._reject(FI_TAP, f"unreadable ({type(e).__name__})", msg)
            return
        if events:
            self.publishers.saw(msg.subject)
            self._enqueue(events, FI_TAP)

    async def _on_publish_side(self, msg: Inbound) -> None:
        if msg.batch_headers:  # an atomic batch's message: open until its commit
            if (stream := await self._stream_of(msg.subject)) is not None:
                try:
                    self.atomic.observe(stream, msg.batch_headers, _now())
                except MalformedInput as e:
                    await self._reject(PUBLISH_TAP, e.reason, msg)
                    return
                if msg.reply and msg.batch_headers.get("Nats-Batch-Sequence") == "1":
                    await self._follow_reply(msg.reply, msg.batch_headers["Nats-Batch-Id"], stream)
            return
        if not msg.reply or not msg.reply.endswith(".$FI"):
            return  # a message that is not part of a batch
        try:
            events, batch = self.tracker.observe_publish(msg.subject, msg.reply, _now())
        except MalformedInput as e:
            await self._reject(PUBLISH_TAP, e.reason, msg)
            return
        if events:
            self._enqueue(events, PUBLISH_TAP)
        if batch is not None and batch.stream is None:
            await self._resolve_stream(batch.batch_id, msg.subject)

    async def _follow_reply(self, reply: str, batch: str, stream: str) -> None:
        """A first message's reply tells a 10210 (the batch never opened): its publisher connection's
        replies are followed from the first batch it is seen with."""
        if (prefix := self.atomic.new_reply_prefix(reply)) is not None:
            await self._subs.follow(self.nc, prefix, self._on_atomic_reply)
            try:
                await self.nc.flush(timeout=2)  # in place on the server before the next batch's reply
                self.atomic.replies_followed += 1
            except Exception as e:
                self.errors.add(f"reply follow: {type(e).__name__}")
        if events := self.atomic.first_message(reply, batch, stream, _now()):
            self._enqueue(events, PUBLISH_TAP)

    async def _on_atomic_reply(self, msg: Inbound) -> None:
        if events := self.atomic.on_reply(msg.subject, msg.data, _now()):
            self._enqueue(events, PUBLISH_TAP)

    async def _resolve_stream(self, batch_id: str, subject: str) -> None:
        if (stream := await self._stream_of(subject)) is not None:
            self.tracker.set_stream(batch_id, stream)

    async def _stream_of(self, subject: str) -> str | None:
        """The stream that binds the subject, as the server says; cached per subject, never guessed."""
        if subject not in self._streams_by_subject:
            self._streams_by_subject[subject] = None  # one lookup per subject at a time
            try:
                self._streams_by_subject[subject] = await stream_of_subject(self.nc, subject)
            except Exception as e:
                del self._streams_by_subject[subject]
                self.errors.add(f"stream lookup: {type(e).__name__}")
                return None
        return self._streams_by_subject[subject]

    def _learn(self, advisories: list[BatchEvent]) -> None:
        """What advisories tell the trackers: a 10208 after an election is a leader change; an election,
        an update or a delete may drop open atomic batches (the stream-event loop looks)."""
        for event in advisories:
            if elected_leader(event) is not None:
                self.tracker.leader_elected(event.stream, event.time)
            if not self._stream_events.full():
                self._stream_events.put_nowait(event)

    def _enqueue(self, events: list[BatchEvent], source: str) -> None:
        if source in (SYSTEM_ADVISORY, ACCOUNT_ADVISORY):
            self._learn(events)
        self.writer.put(events, source)

    # -- housekeeping ----------------------------------------------------------------------

    async def _stream_event_loop(self) -> None:
        """Stream events (from the advisories) -> what they silently dropped of open atomic batches."""
        while not self._stopping:
            self.loops.beat("streams")
            try:
                event = await asyncio.wait_for(self._stream_events.get(), 0.5)
            except asyncio.TimeoutError:
                continue
            if found := await self.atomic.on_context(event, _now()):
                self._enqueue(found, PUBLISH_TAP if found[0].kind is EventKind.ATOMIC_LOST else COLLECTOR)

    async def _tick_loop(self) -> None:
        last_status = 0.0
        while not self._stopping:
            self.loops.beat("ticker")
            due = time.monotonic() + self.settings.tick_every
            await asyncio.sleep(self.settings.tick_every)
            if self.cpu is not None:
                now = time.monotonic()
                self.cpu.on_tick(now - due, now)
            self._enqueue(self.tracker.tick(_now()), FI_TAP)
            self.atomic.tick(_now())
            if time.monotonic() - last_status >= self.settings.status_every:
                last_status = time.monotonic()
                self._enqueue([await self.status_event()], COLLECTOR)

    async def heartbeat(self) -> None:
        """Write a status now (it goes out every status_every seconds on its own)."""
        self._enqueue([await self.status_event()], COLLECTOR)

    async def status_event(self) -> BatchEvent:
        self._status_seq += 1
        return BatchEvent(
            f"status.{self.instance}.{self._status_seq}", EventKind.COLLECTOR_STATUS, _now(),
            detail=(await self.status()).to_json(),
        )

    async def status(self) -> CollectorStatus:
        lag = None
        if self.advisory_stream:
            try:
                lag = await self.advisories.pending()
            except Exception as e:  # the status goes out without the lag rather than not at all
                self.errors.add(f"consumer info: {type(e).__name__}")
        now = time.monotonic()
        unhealthy = self.health.verdict(now, lag, self.loops.stale(now), self.writer.queued)
        return CollectorStatus(
            instance=self.instance, alive_s=round(now - self._started, 1), connected=self.nc.is_connected,
            healthy=not unhealthy, unhealthy=tuple(unhealthy), events_written=self.writer.events_written,
            replies_tapped=self.tapped, duplicates=self.writer.duplicates, rejected=dict(self.rejected),
            errors=dict(self.errors), ignored=dict(self.ignored), quarantined=self.quarantine.kept,
            not_quarantined=self.quarantine.not_kept, advisory_lag=lag, advisories_durable=self.advisories_durable,
            batches_tracked=len(self.tracker.batches), batches_untracked=self.tracker.untracked,
            batches_refused_by_prefix=dict(self.tracker.refused), batch_timeout=self.tracker.batch_timeout,
            batch_timeout_source=self.batch_timeout_source, queued=self.writer.queued, problems=tuple(self.problems),
            notes=tuple(self.notes), loops=self.loops.status(), cpu=self.cpu.status() if self.cpu else None,
            publishers_known=self.publishers.known, connz_requests=self.publishers.requests,
            publisher_note=self.publishers.note,
        )
