"""The taps into the intake: fast-ingest flow acks on `$FI` reply subjects, the publish side of
batches (when tapped), the replies to atomic batches' first messages, and leader elections live
(an election reaches us ahead of the refusals it causes, while the durable capture may lag it)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Callable

from console.broker.capture import LEADER_ELECTIONS, Inbound, Subscriptions, stream_of_subject
from console.broker.connection import Connection, flush
from console.collector.grading import Grading
from console.collector.health import Loops
from console.collector.intake import Intake
from console.collector.publishers import Publishers
from console.collector.state import now
from console.config import CollectorSettings
from console.domain.advisory_events import IgnoredAdvisory, advisory_to_event
from console.domain.events import FI_TAP, PUBLISH_TAP, elected_leader
from console.domain.fast_ingest import FastReplySubject
from console.domain.replies import MalformedReply
from console.domain.wire import MalformedInput, Tally

log = logging.getLogger(__name__)

PACED_UP_TO = 1_000  # replies waiting for their turn past which the taps are not paced: behind, not keeping up
PACED_UP_TO_BYTES = 64 * 1024  # of replies read in one pass, past which the taps are not paced: behind as well


class TapReader:
    def __init__(self, nc: Connection, settings: CollectorSettings, intake: Intake, publishers: Publishers,
                 subs: Subscriptions, loops: Loops, errors: Tally, stopping: Callable[[], bool],
                 grading: Grading | None = None):
        self.nc, self.settings, self.intake, self.publishers, self.subs = nc, settings, intake, publishers, subs
        self.grading = grading
        self.loops, self.errors, self.stopping = loops, errors, stopping
        self.state = intake.state
        self.tapped = 0  # $FI replies received
        self._tapped_bytes, self._bytes_at_pass = 0, 0
        # In a supercluster: a tap connection in each cluster (its own among them), all in one queue group
        # (Collector.start): each reply is heard in the cluster it is published in, with that cluster's name
        self.clusters: dict[str, Connection] = {}
        self.queue = ""
        self._last_tap = 0.0
        self._streams_by_subject: dict[str, str | None] = {}

    def connections(self) -> list[Connection]:
        """Each connection the taps read from, once (its own cluster's is the collector's)."""
        return list({id(nc): nc for nc in (self.nc, *self.clusters.values())}.values())

    async def start(self) -> asyncio.Task[None] | None:
        """Subscribes; the pacer's task, when pacing is asked for."""
        # Read as the connection parses them, in the wire's order (an election comes before the refusals it
        # causes); queued like the publish side's messages when that is tapped, whose handler waits (a
        # batch's message comes before its reply, and a reply read at once would overtake it).
        queued = bool(self.settings.tap_publish_subjects)
        await self.subs.read(self.nc, LEADER_ELECTIONS, self._on_election, queued=queued)
        taps = self.clusters.items() if len(self.clusters) > 1 else [(None, self.nc)]
        for cluster, nc in taps:
            for prefix in self.settings.inbox_prefixes:
                await self.subs.tap_fast_replies(nc, prefix, functools.partial(self._on_tap, cluster=cluster),
                                                 self.queue if cluster else "", queued)
        for subject in self.settings.tap_publish_subjects:
            await self.subs.follow(self.nc, subject, self._on_publish_side)
        if self.settings.pace_ms > 0:
            return self.loops.start("pacer", self._pace_loop, self.stopping)
        return None

    async def _pace_loop(self) -> None:
        while not self.stopping():
            self.loops.beat("pacer")
            # "Recently", not "since my last pass": after sleep(0) this task resumes before the
            # reads that arrived during the pause have been handled.
            paces = self.paces()
            self._bytes_at_pass = self._tapped_bytes
            if paces:
                time.sleep(self.settings.pace_ms / 1000)  # deliberate: see CollectorSettings.pace_ms
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(0.05)

    def paces(self) -> bool:
        """Whether the next pass pauses: while replies flow, but never while events wait to be written (a
        loss must reach the log at once), nor while replies wait, read, for their turn, nor after a pass that
        read more than a light load's (a flood: a loss among them is behind every one; the taps read as the
        connection parses, so what waits for them waits in the socket)."""
        return time.monotonic() - self._last_tap < 0.1 and self.intake.writer.queued == 0 and \
            self.subs.backlog() < PACED_UP_TO and self._tapped_bytes - self._bytes_at_pass < PACED_UP_TO_BYTES

    def _on_election(self, msg: Inbound) -> None:
        """Only for the tracker; the durable capture stores the advisory (and counts it if it is bad)."""
        try:
            event = advisory_to_event(msg.data)
        except (MalformedInput, IgnoredAdvisory):
            return
        if elected_leader(event) is not None and event.stream:
            self.state.tracker.leader_elected(event.stream, now())  # the tap's clock: the refusals are timed by it

    def _on_tap(self, msg: Inbound, cluster: str | None = None) -> None:
        self.tapped += 1
        self._tapped_bytes += len(msg.data) + len(msg.subject)
        self._last_tap = time.monotonic()
        tracker = self.state.tracker
        if (reason := tracker.refused_before(msg.data)) is not None:  # a flood's body, read once
            self.intake.reject(FI_TAP, reason, msg)
            return
        try:
            if msg.no_responders:  # no stream answered: a lost message of a tracked batch, else nothing
                events = tracker.no_responders(msg.subject, now())
                if not events:
                    self.intake.ignored.add("no responders")
            else:
                events = tracker.observe(msg.subject, msg.data)  # its clock, once the body is read
        except MalformedInput as e:
            if self.grading is not None and not isinstance(e, MalformedReply):  # a subject the server refused
                self.grading.reply(msg)  # is evidence; a body that is no reply is not
            self.intake.reject(FI_TAP, e.reason, msg)
            return
        except Exception as e:  # a bug meeting odd input: the input is skipped, never the tap
            log.exception("tapped reply not readable")
            self.intake.reject(FI_TAP, f"unreadable ({type(e).__name__})", msg)
            return
        if self.grading is not None:
            self.grading.reply(msg)
        if events:
            self.publishers.saw(msg.subject)
            self.intake.put([e.but(cluster=cluster) for e in events] if cluster else events, FI_TAP)

    async def _on_publish_side(self, msg: Inbound) -> None:
        if msg.batch_headers:  # an atomic batch's message: open until its commit
            stream = await self._stream_of(msg.subject)
            if self.grading is not None:
                self.grading.atomic_message(msg, stream)
            if stream is not None:
                try:
                    answered = self.state.atomic.observe(stream, msg.batch_headers, now(), msg.reply)
                except MalformedInput as e:
                    self.intake.reject(PUBLISH_TAP, e.reason, msg)
                    return
                if answered:
                    self.intake.put(answered, PUBLISH_TAP)
                self.intake.kept.saw(msg.batch_headers["Nats-Batch-Id"], int(msg.batch_headers["Nats-Batch-Sequence"]),
                                     stream, msg.subject, msg.headers, msg.data, now())
                if msg.reply and msg.batch_headers.get("Nats-Batch-Sequence") == "1":
                    await self._follow_reply(msg.reply, msg.batch_headers["Nats-Batch-Id"], stream, msg.arrival)
            return
        if not msg.reply or not msg.reply.endswith(".$FI"):
            return  # a message that is not part of a batch
        if self.grading is not None:
            self.grading.fast_message(msg)
        try:
            where = FastReplySubject.parse(msg.reply)
            events, batch = self.state.tracker.observe_publish(msg.subject, where, now())
        except MalformedInput as e:
            if self.grading is not None:  # a subject the server refuses is graded, so named (only from the
                self.publishers.saw(msg.reply)  # publish side: a forged reply would make a question each)
            self.intake.reject(PUBLISH_TAP, e.reason, msg)
            return
        if events:
            self.publishers.saw(msg.reply)  # a start seen: who publishes it, asked while its inbox is there
            self.intake.put(events, PUBLISH_TAP)
        if batch is not None and batch.stream is None:
            if (stream := await self._stream_of(msg.subject)) is not None:
                self.state.tracker.set_stream(batch.batch_id, stream)
                if self.grading is not None:
                    self.grading.grader.set_stream(batch.batch_id, stream)
        # a batch that ended is still given its messages while its loss waits for them: a loaded collector
        # reads the replies ahead of the publish side
        if batch is not None or self.intake.kept.wants(where.batch_id):
            self.intake.kept.saw(where.batch_id, where.seq, batch.stream if batch else None, msg.subject,
                                 msg.headers, msg.data, now())

    async def _follow_reply(self, reply: str, batch: str, stream: str, arrival: int) -> None:
        """A first message's reply tells a 10210 (the batch never opened): its publisher connection's
        replies are followed from the first batch it is seen with."""
        atomic = self.state.atomic
        if (prefix := atomic.new_reply_prefix(reply)) is not None:
            await self.subs.follow(self.nc, prefix, self._on_atomic_reply)
            try:
                await flush(self.nc, timeout=2)  # in place on the server before the next batch's reply
                atomic.replies_followed += 1
            except Exception as e:
                self.errors.add(f"reply follow: {type(e).__name__}")
        if events := atomic.first_message(reply, batch, stream, now()):
            self.intake.put(events, PUBLISH_TAP)
            if self.grading is not None:
                self.grading.refused(events, arrival)

    async def _on_atomic_reply(self, msg: Inbound) -> None:
        if events := self.state.atomic.on_reply(msg.subject, msg.data, now(), msg.no_responders):
            self.intake.put(events, PUBLISH_TAP)
            if self.grading is not None:
                self.grading.refused(events, msg.arrival)

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
