"""What the `$FI` reply side says about other clients' fast batches: a state machine per batch.

Pure: the collector feeds it (subject, body, time) for every tapped reply, the streams' leader
elections, and calls tick() every interval. Memory is bounded: a batch is forgotten after its
outcome, and the outcome is remembered (bounded) so late replies neither repeat nor contradict it.
A tracked batch is never evicted to admit another: past `max_batches`, or past a quarter of them
under one reply prefix (one publisher, or one forger), a new batch is not tracked (counted in
`untracked`, and per prefix in `refused`), but its gaps, errors and outcome are still reported, since
those need no state, and its start too, up to ten a second (a forger's new ids would be a flood of events).

Losses the server does not advertise are inferred, and an inference that a later reply
contradicts is retracted (LOSS_RETRACTED):
- a batch answered 10208 (its id unknown to the stream's leader), or a tracked batch answered 503
  (no stream answered: no leader during an election), is lost: FAST_LOST at the first refusal, then
  one FAST_ERROR counting the refusals once they stop; for a leader change when the stream elected
  one since the batch's last good reply;
- a batch silent past the batch timeout is dropped only when an ack was due by its own cadence
  (the publish side tapped, or its acks' rate times its flow); otherwise it is slow, which the
  reply side cannot tell from dropped (FAST_SLOW: every message resets the server's timer, and a
  slow producer's messages are not replied to until the flow is reached).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from console.domain.codes import describe
from console.domain.events import BatchEvent, EventKind
from console.domain.fast_busy import TOO_MANY_REQUESTS, Refused, RefusedRuns
from console.domain.fast_ingest import MAX_FLOW, FastOp, FastReplySubject, GapMode, well_formed
from console.domain.wire import Tally
from console.domain.replies import PLAIN_ACK, ApiError, FlowAck, FlowError, FlowGap, MalformedReply, PubAck, Reply, to_reply


@dataclass
class TrackedBatch:
    batch_id: str
    gap_mode: str
    requested_flow: int
    flow: int
    first_seen: datetime
    last_seen: datetime
    last_progress: datetime
    highest_ack: int = 0
    acks_total: int = 0
    acks_pending: int = 0  # acks not yet folded into a progress event
    prefix: str = ""
    stream: str | None = None
    subject: str | None = None  # known when the publish side is tapped
    last_problem: str | None = None  # "gap" | "error"
    first_ack: tuple[int, datetime] | None = None  # (seq, time): with last_ack, the batch's own rate
    last_ack: tuple[int, datetime] | None = None
    publish_tapped: bool = False  # every message is seen: silence past the timeout is a drop
    unheard: tuple[datetime, datetime] | None = None  # the tap was deaf then (the collector reconnecting)
    slow_reported: bool = False

    def ack_interval(self) -> float | None:
        """Seconds between acks at this batch's observed rate; None until two acks tell it."""
        if self.first_ack is None or self.last_ack is None:
            return None
        messages = self.last_ack[0] - self.first_ack[0]
        seconds = (self.last_ack[1] - self.first_ack[1]).total_seconds()
        if messages <= 0 or seconds < 0:
            return None
        return 0.0 if seconds == 0 else self.flow / (messages / seconds)  # 0: faster than the clock tells


@dataclass
class LostFast:
    """A batch answered 10208, until its refusals stop and are counted."""

    batch_id: str
    stream: str | None
    gap_mode: str
    last_acked: int | None
    last_good: datetime | None  # its last reply before the first refusal
    first_refused: int
    first_time: datetime
    last_time: datetime
    refused: int = 1
    commit_refused: bool = False
    cause: str = "unknown_batch"  # or "no_responders": a 503, no stream answered (no leader, or no stream)


UNKNOWN_BATCH = 10208
TOO_MANY_INFLIGHT = 10211
ACK_DUE_MARGIN = 2.0  # silence longer than this many ack intervals means an ack was missed
SLOW_GIVE_UP = 600.0  # seconds a silent batch that cannot be judged stays tracked
ELECTION_SLACK = timedelta(seconds=1)  # the election advisory and the last good reply race
RETRACTABLE = ("dropped", "lost")
UNTRACKED_SAID_PER_PREFIX = 100  # a second: events of batches not tracked, under one reply prefix
UNTRACKED_SAID = 1_000  # a second, under every prefix
UNTRACKED_STARTS_SAID = 10  # a second at most: the starts of batches not tracked said as events
REMEMBERED_BODY = 512  # bytes: a refused body up to this long is remembered with its reason
REMEMBERED_BODIES = 1024  # at most (so at most 512 KiB), forgotten all at once when full


class PerSecond:
    """At most `in_all` a second by the caller's clock, and at most `per_key` of them under one key."""

    def __init__(self, in_all: int, per_key: int | None = None):
        self.in_all, self.per_key = in_all, per_key
        self._since = self._until = datetime.min.replace(tzinfo=timezone.utc)  # the second counted in
        self._taken = 0
        self._by_key: Counter[str] = Counter()

    def left(self, now: datetime, key: str = "") -> bool:
        if not self._since <= now < self._until:  # another second
            self._since = now.replace(microsecond=0)
            self._until, self._taken = self._since + timedelta(seconds=1), 0
            self._by_key.clear()
        return self._taken < self.in_all and (self.per_key is None or self._by_key[key] < self.per_key)

    def take(self, now: datetime, key: str = "") -> bool:
        if not self.left(now, key):
            return False
        self._taken += 1
        if self.per_key is not None:
            self._by_key[key] += 1
        return True


class FastBatchTracker:
    def __init__(self, batch_timeout: float = 10.0, max_batches: int = 10_000, progress_interval: float = 1.0,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.batch_timeout = batch_timeout
        self.clock = clock  # observe's time when none is given: read once the body is, not for a malformed one
        self.max_batches = max_batches
        self.progress_interval = progress_interval
        self.batches: dict[str, TrackedBatch] = {}
        self.max_per_prefix = max(1, max_batches // 4)
        self._per_prefix: Counter[str] = Counter()
        self.untracked = 0
        self.refused = Tally()  # reply prefix -> batches not tracked
        self.closed: OrderedDict[str, str] = OrderedDict()  # batch id -> outcome (committed, ended, dropped, lost)
        self.lost: dict[str, LostFast] = {}  # 10208 seen, FAST_LOST not yet emitted
        self.elections: dict[str, datetime] = {}  # stream -> its last leader election
        self.refused_after_end = 0  # 10208s for batches whose outcome was already known
        self.busy = RefusedRuns(max_batches)  # messages a full queue refused (429 10167), by batch
        self._refused_bodies: dict[bytes, str] = {}  # body -> why it is no reply (refused_before)
        self._starts_said = PerSecond(UNTRACKED_STARTS_SAID)  # starts of batches not tracked, said as events
        self._losses_said = PerSecond(UNTRACKED_SAID, UNTRACKED_SAID_PER_PREFIX)  # their losses, by reply prefix
        self.unsaid = Tally()  # reply prefix -> replies of batches not tracked, past their rate: counted (_unsaid)

    def leader_elected(self, stream: str, when: datetime) -> None:
        latest = max(when, self.elections.pop(stream, when))
        self.elections[stream] = latest
        if len(self.elections) > self.max_batches:
            del self.elections[next(iter(self.elections))]

    def refused_before(self, data: bytes) -> str | None:
        """Why a body of these bytes was refused lately, if it was: a flood repeats its body, and the tap
        skips it without reading it again (the reason is the body's alone, read before the subject)."""
        return self._refused_bodies.get(data)

    def _read(self, data: bytes) -> Reply:
        try:
            return to_reply(data)
        except MalformedReply as e:
            if len(data) <= REMEMBERED_BODY:
                if len(self._refused_bodies) >= REMEMBERED_BODIES:
                    self._refused_bodies.clear()
                self._refused_bodies[bytes(data)] = e.reason
            raise

    def observe(self, subject: str, data: bytes, now: datetime | None = None) -> list[BatchEvent]:
        """One tapped reply, read at `now` (the clock's, when None). Raises InvalidReplySubject or
        MalformedReply for the caller to count."""
        # Fast path, most of the traffic at low flows: a plain flow ack of a batch already tracked
        # (its subject was validated when the batch was first seen).
        reply: Reply
        if (plain := PLAIN_ACK.fullmatch(data)) is not None and 1 <= (msgs := int(plain[2])) <= MAX_FLOW:
            now = now or self.clock()
            tokens = subject.rsplit(".", 6)
            if len(tokens) == 7 and (known := self.batches.get(tokens[1])) is not None and tokens[6] == "$FI":
                events: list[BatchEvent] = []
                self._on_ack(known, FlowAck(int(plain[1]), msgs), now, events)  # as to_reply reads it
                return events
            if self._counted_untracked(tokens, now):
                return []
            reply = FlowAck(int(plain[1]), msgs)
        else:
            reply = self._read(data)  # the body first: one that is no reply is forged, whatever its subject
            now = now or self.clock()
            if isinstance(reply, (FlowGap, FlowError, PubAck, ApiError)) and self._unsaid(subject, now):
                return []
        where = FastReplySubject.parse(subject)
        refusal = reply if isinstance(reply, (ApiError, FlowError)) else None
        code = reply.err_code if isinstance(reply, ApiError) else reply.error.err_code if isinstance(reply, FlowError) else None
        if code == UNKNOWN_BATCH:
            return self._on_unknown_batch(where, refusal, now)
        if code == TOO_MANY_REQUESTS and refusal is not None:
            return self._on_busy(where, refusal, now)
        events = []
        if self.closed.get(where.batch_id) in RETRACTABLE and isinstance(reply, (FlowAck, FlowGap, PubAck)):
            events.append(self._retract(where, now))
        self.lost.pop(where.batch_id, None)  # a good reply after a refusal: not lost after all
        if code == TOO_MANY_INFLIGHT and refusal is not None:
            return events + self._on_rejected(where, refusal, now)
        batch = self.batches.get(where.batch_id)
        if isinstance(reply, FlowAck):
            if batch is None:
                batch = self._track(where, reply, now, events)
            if batch is not None:
                self._on_ack(batch, reply, now, events)
        elif isinstance(reply, FlowGap):
            self.busy.gap(where.batch_id, reply.seq)
            if batch:
                batch.last_problem, batch.last_seen = "gap", now
            events.append(self._event(where, now, EventKind.FAST_GAP, f"gap.{reply.seq}", batch,
                                      seq=reply.seq, first_lost_seq=reply.first_lost_seq, lost=reply.lost))
        elif isinstance(reply, FlowError):
            if batch:
                batch.last_problem, batch.last_seen = "error", now
            events.append(self._event(where, now, EventKind.FAST_ERROR, f"err.{reply.seq}.{reply.error.err_code}", batch,
                                      seq=reply.seq, err_code=reply.error.err_code, description=reply.error.description))
        elif isinstance(reply, PubAck):
            self.busy.ended(where.batch_id)
            events += self._on_puback(where, batch, reply, now)
        elif isinstance(reply, ApiError):
            if batch:
                events += self._flush_progress(batch, now)
                self._forget(where.batch_id)
            self._close(where.batch_id, "ended")
            events.append(self._event(where, now, EventKind.FAST_ERROR, f"err.{where.seq}.{reply.err_code}", batch,
                                      stream=reply.stream, seq=where.seq, err_code=reply.err_code,
                                      description=reply.description))
        else:
            raise MalformedReply("an empty reply on a $FI subject")
        return events

    def observe_publish(self, subject: str, where: FastReplySubject, now: datetime
                        ) -> tuple[list[BatchEvent], TrackedBatch | None]:
        """One message of the publish side (opt-in tap), its reply subject parsed: keeps a quiet batch alive
        and learns its subject. Returns the events and the batch it touched (None: not tracked)."""
        batch = self.batches.get(where.batch_id)
        events: list[BatchEvent] = []
        if batch is None:
            if where.op is not FastOp.START:
                return events, None
            # Granted flow is not known until the first ack; a different grant shows as a flow change.
            batch = self._admit(where, where.flow, now)
            if batch is None and not self._says_untracked(now):
                return events, None
            events.append(self._event(where, now, EventKind.FAST_STARTED, "started", batch, flow=where.flow,
                                      previous_flow=where.flow, detail=f"seen publishing on {subject}"
                                      + ("" if batch else " (not tracked: tracker full)")))
            if batch is None:
                return events, None
        batch.last_seen = now
        batch.subject = subject
        batch.publish_tapped = True
        return events, batch

    def set_stream(self, batch_id: str, stream: str) -> None:
        if (batch := self.batches.get(batch_id)) is not None and batch.stream is None:
            batch.stream = stream

    def not_heard(self, since: datetime, back: datetime) -> None:
        """The tap heard nothing from `since` to `back` (the collector's connection was down): a batch
        open then is not judged by its silence, whose end may have gone by unheard."""
        for batch in self.batches.values():
            batch.unheard = (since, back)
            batch.last_seen = max(batch.last_seen, back)

    def tick(self, now: datetime) -> list[BatchEvent]:
        """Fold pending acks into progress events; judge batches silent past the timeout; report
        10208 losses once their refusals have stopped (or the commit was refused)."""
        events: list[BatchEvent] = []
        for refused in self.busy.due(now, timedelta(seconds=self.progress_interval), timedelta(seconds=SLOW_GIVE_UP)):
            events += self._refused_tail(refused, now)
        # two instants, not two differences a batch: a tick looks at every batch tracked (10,000 at most)
        progress_due, timed_out = now - timedelta(seconds=self.progress_interval), now - timedelta(seconds=self.batch_timeout)
        for batch_id, batch in list(self.batches.items()):
            if batch.last_seen >= timed_out:
                if batch.last_progress <= progress_due:
                    events += self._flush_progress(batch, now)
                continue
            idle = (now - batch.last_seen).total_seconds()
            events += self._flush_progress(batch, now)
            if batch.unheard is not None and batch.last_seen <= batch.unheard[1]:  # nothing heard since: its end
                # may have gone by while the tap heard nothing, so its silence is no drop
                self._forget(batch_id)
                self._close(batch_id, "unheard")
                since, back = batch.unheard
                events.append(BatchEvent(
                    f"fi.{batch_id}.unheard", EventKind.FAST_SLOW, now, batch.stream, batch_id, gap_mode=batch.gap_mode,
                    flow=batch.flow, seq=batch.highest_ack, inferred=True,
                    detail=f"nothing heard of it since the collector's connection was down "
                           f"({since:%H:%M:%S}-{back:%H:%M:%S} UTC): committed or dropped, the reply side cannot tell"))
            elif self._ack_was_due(batch, idle):
                self._forget(batch_id)
                self._close(batch_id, "dropped")
                events.append(BatchEvent(
                    f"fi.{batch_id}.dropped", EventKind.FAST_DROPPED, now, batch.stream, batch_id,
                    gap_mode=batch.gap_mode, flow=batch.flow, seq=batch.highest_ack, inferred=True,
                    detail=f"no reply seen for {idle:.1f}s (batch timeout {self.batch_timeout:g}s)"
                           + ("" if batch.publish_tapped else f"; at its rate an ack was due every "
                                                               f"{batch.ack_interval():.3g}s"),
                ))
            elif idle > max(SLOW_GIVE_UP, self.batch_timeout):
                self._forget(batch_id)
            elif not batch.slow_reported:
                batch.slow_reported = True
                interval = batch.ack_interval()
                events.append(BatchEvent(
                    f"fi.{batch_id}.slow", EventKind.FAST_SLOW, now, batch.stream, batch_id, gap_mode=batch.gap_mode,
                    flow=batch.flow, seq=batch.highest_ack, inferred=True,
                    detail=f"no reply for {idle:.1f}s, past the batch timeout, but "
                           + ("its rate is not known yet (one ack)" if interval is None
                              else f"at its rate an ack is due every {interval:.3g}s")
                           + ": slow, or dropped; the reply side cannot tell",
                ))
        for record in list(self.lost.values()):
            if record.commit_refused or (now - record.last_time).total_seconds() >= self.progress_interval:
                del self.lost[record.batch_id]
                events.append(self._refused_event(record, now))
        return events

    def _ack_was_due(self, batch: TrackedBatch, idle: float) -> bool:
        if batch.publish_tapped:  # every message seen, and each resets the server's timer
            return True
        interval = batch.ack_interval()
        return interval is not None and idle > ACK_DUE_MARGIN * interval

    def no_responders(self, subject: str, now: datetime) -> list[BatchEvent]:
        """A 503 status on a batch's reply: no stream answered that message, so it was not stored. On a
        cluster that is a stream with no leader (an election, a node lost). A batch never seen
        acknowledged is not tracked and stays unreported (no stream on the subject at all)."""
        where = FastReplySubject.parse(subject)
        if where.batch_id not in self.batches and where.batch_id not in self.lost:
            return []
        return self._on_unknown_batch(where, None, now, cause="no_responders")

    def _on_unknown_batch(self, where: FastReplySubject, reply: ApiError | FlowError | None, now: datetime,
                          cause: str = "unknown_batch") -> list[BatchEvent]:
        """10208 (or a 503): FAST_LOST at the first refusal (as soon as a bare subscriber would know),
        then one count of the refusals that followed once they stop; never an event per message."""
        if (record := self.lost.get(where.batch_id)) is not None:
            record.refused += 1
            record.last_time = now
            record.commit_refused = record.commit_refused or where.op in (FastOp.COMMIT, FastOp.EOB)
            return []
        if self.closed.get(where.batch_id) is not None:  # its outcome is known (a fail-mode end, a drop)
            self.refused_after_end += 1
            return []
        batch = self.batches.get(where.batch_id)
        events = self._flush_progress(batch, now) if batch else []
        stream = (reply.stream if isinstance(reply, ApiError) else None) or (batch.stream if batch else None)
        record = LostFast(where.batch_id, stream, where.gap_mode.value, batch.highest_ack if batch else None,
                          batch.last_seen if batch else None, where.seq, now, now, refused=1,
                          commit_refused=where.op in (FastOp.COMMIT, FastOp.EOB), cause=cause)
        self.lost[where.batch_id] = record
        if batch:
            self._forget(where.batch_id)
        self._close(where.batch_id, "lost")
        return events + [self._lost_event(record, now)]

    def _lost_event(self, record: LostFast, now: datetime) -> BatchEvent:
        since = record.last_good or record.first_time - timedelta(seconds=self.batch_timeout)
        elected = self.elections.get(record.stream) if record.stream else None
        leader_change = elected is not None and since - ELECTION_SLACK <= elected <= now + ELECTION_SLACK
        acked = "no message acknowledged" if record.last_acked is None else f"last acknowledged seq {record.last_acked}"
        code, text = (UNKNOWN_BATCH, describe(UNKNOWN_BATCH)) if record.cause == "unknown_batch" else \
            (None, "no responders (503): no stream answered")
        return BatchEvent(
            f"fi.{record.batch_id}.lost", EventKind.FAST_LOST, now, record.stream, record.batch_id,
            reason="leader_change" if leader_change else record.cause, gap_mode=record.gap_mode,
            seq=record.last_acked, err_code=code, description=text,
            detail=f"refused from batch seq {record.first_refused}; {acked}"
                   + (f"; the stream elected a leader at {elected:%H:%M:%S.%f}" if leader_change else ""),
        )

    def _refused_event(self, record: LostFast, now: datetime) -> BatchEvent:
        unknown = record.cause == "unknown_batch"
        return BatchEvent(
            f"fi.{record.batch_id}.refused", EventKind.FAST_ERROR, now, record.stream, record.batch_id,
            gap_mode=record.gap_mode, seq=record.first_refused, lost=record.refused,
            err_code=UNKNOWN_BATCH if unknown else None,
            description=describe(UNKNOWN_BATCH) if unknown else "no responders (503)",
            detail=f"{record.refused} message(s) refused from batch seq {record.first_refused}"
                   + (", the commit included" if record.commit_refused else ""),
        )

    def _on_busy(self, where: FastReplySubject, reply: ApiError | FlowError, now: datetime) -> list[BatchEvent]:
        """10167 (console.domain.fast_busy): said at the batch's first; the gap acks name the runs; a refused
        commit's tail is said by `tick` once the replies that raced it are in."""
        if self.closed.get(where.batch_id) is not None:  # after its end: the batch's outcome is already said
            self.refused_after_end += 1
            return []
        batch = self.batches.get(where.batch_id)
        if batch:
            batch.last_problem, batch.last_seen = "busy", now
        error = reply if isinstance(reply, ApiError) else reply.error
        stream = error.stream or (batch.stream if batch else None)
        first = self.busy.refused(where.batch_id, stream, where.gap_mode.value, where.seq,
                                  where.op in (FastOp.COMMIT, FastOp.EOB), now)
        if first is None:
            return []
        return [self._event(where, now, EventKind.FAST_ERROR, f"err.{where.seq}.{error.err_code}", batch, stream=stream,
                            seq=where.seq, err_code=error.err_code, description=error.description,
                            detail="the server's queue was full (a publisher ahead of its flow acks): refused from "
                                   "here; the gap acks name each run")]

    def _refused_tail(self, record: Refused, now: datetime) -> list[BatchEvent]:
        """A batch whose commit a full queue refused: what was refused past its last gap ack, and its end."""
        if (batch := self.batches.get(record.batch_id)) is not None:
            events = self._flush_progress(batch, now)
            record.stream = record.stream or batch.stream
            self._forget(record.batch_id)
        else:
            events = []
        self._close(record.batch_id, "ended")
        runs = record.tail()
        for i, (first, last) in enumerate(runs):
            more = record.uncounted if i == len(runs) - 1 else 0
            events.append(BatchEvent(
                f"fi.{record.batch_id}.err.{first}.{TOO_MANY_REQUESTS}.end", EventKind.FAST_ERROR, now, record.stream,
                record.batch_id, gap_mode=record.gap_mode, seq=first, lost=last - first + 1 + more,
                err_code=TOO_MANY_REQUESTS, description="too many requests",
                detail=f"the commit was refused too: batch seq {first} to {last} were not stored"
                       + (f" (and {more} more refusals not kept)" if more else "") + "; no gap ack or PubAck follows"))
        return events

    def _on_rejected(self, where: FastReplySubject, reply: ApiError | FlowError, now: datetime) -> list[BatchEvent]:
        """10211: refused for too many batches in flight (a 429), once per batch."""
        if (batch := self.batches.get(where.batch_id)) is not None:
            self._forget(where.batch_id)
        if self.closed.get(where.batch_id) == "rejected":
            return []
        self._close(where.batch_id, "rejected")
        error = reply if isinstance(reply, ApiError) else reply.error
        return [self._event(where, now, EventKind.FAST_REJECTED, "rejected", batch, stream=error.stream,
                            seq=where.seq, err_code=error.err_code, description=error.description)]

    def _retract(self, where: FastReplySubject, now: datetime) -> BatchEvent:
        was = self.closed.pop(where.batch_id)
        return self._event(where, now, EventKind.LOSS_RETRACTED, f"retracted.{was}", None, reason=was,
                           detail=f"a reply came after the batch was reported {was}: it was not lost")

    def _close(self, batch_id: str, outcome: str) -> None:
        self.busy.ended(batch_id)
        self.closed.pop(batch_id, None)
        self.closed[batch_id] = outcome
        if len(self.closed) > self.max_batches:
            del self.closed[next(iter(self.closed))]

    # -- internals -------------------------------------------------------------------------

    def _admit(self, where: FastReplySubject, flow: int, now: datetime) -> TrackedBatch | None:
        """A new batch, or None (counted) when the tracker or this prefix's share of it is full."""
        if len(self.batches) >= self.max_batches or self._per_prefix[where.prefix] >= self.max_per_prefix:
            self.untracked += 1
            self.refused.add(where.prefix[:100])
            return None
        batch = TrackedBatch(where.batch_id, where.gap_mode.value, where.flow, flow, now, now, now, prefix=where.prefix)
        self.batches[where.batch_id] = batch
        self._per_prefix[where.prefix] += 1
        return batch

    def _unknown(self, tokens: list[str]) -> bool:
        """Whether a reply subject split from the right is well formed and names a batch the tracker knows
        nothing of: neither tracked, nor ended, nor lost."""
        return len(tokens) == 7 and tokens[1] not in self.batches and tokens[1] not in self.closed \
            and tokens[1] not in self.lost and well_formed(tokens)

    def _counted_untracked(self, tokens: list[str], now: datetime) -> bool:
        """A plain ack of a new batch with no room for it, its start not to be said (a forger's flood of new
        ids, past its share): counted as the whole reading would count it, at a fraction of the cost."""
        prefix = tokens[0]
        if (len(self.batches) < self.max_batches and self._per_prefix.get(prefix, 0) < self.max_per_prefix) \
                or not self._unknown(tokens) or self._starts_said.left(now):  # said: read in full
            return False
        self.untracked += 1
        self.refused.add(prefix[:100])
        return True

    def _unsaid(self, subject: str, now: datetime) -> bool:
        """A reply other than an ack (a gap, an error, a commit, a refusal) of a batch the tracker knows
        nothing of is said as an event without state, so a forger's flood of them would be a flood of losses
        in the event log, filling the writer's queue ahead of real ones: past UNTRACKED_SAID_PER_PREFIX a
        second under its reply prefix, or UNTRACKED_SAID in all, it is only counted (`unsaid`, by prefix).
        A real publisher's batch is tracked from its first ack, and nothing of it is ever held back."""
        tokens = subject.rsplit(".", 6)
        if not self._unknown(tokens) or self._losses_said.take(now, tokens[0]):
            return False
        self.unsaid.add(tokens[0][:100])
        return True

    def _says_untracked(self, now: datetime) -> bool:
        """Whether the start of a batch not tracked is an event: at most UNTRACKED_STARTS_SAID a second, the
        rest only counted. A start carries no loss, and a forger's flood of new batch ids would otherwise
        be a flood of events, filling the writer's queue ahead of real ones."""
        return self._starts_said.take(now)

    def _forget(self, batch_id: str) -> None:
        if (batch := self.batches.pop(batch_id, None)) is not None:
            self._per_prefix[batch.prefix] -= 1
            if not self._per_prefix[batch.prefix]:
                del self._per_prefix[batch.prefix]

    def _track(self, where: FastReplySubject, ack: FlowAck, now: datetime, events: list[BatchEvent]) -> TrackedBatch | None:
        batch = self._admit(where, ack.msgs, now)
        if batch is None and not self._says_untracked(now):
            return None
        joined_late = where.op is not FastOp.START
        detail = "first seen mid-batch" if joined_late else None
        if batch is None:
            detail = "not tracked: tracker full" + (", first seen mid-batch" if joined_late else "")
        events.append(self._event(where, now, EventKind.FAST_STARTED, "started", batch, flow=ack.msgs,
                                  previous_flow=where.flow, inferred=joined_late, detail=detail))
        return batch

    def _on_ack(self, batch: TrackedBatch, ack: FlowAck, now: datetime, events: list[BatchEvent]) -> None:
        batch.last_seen = now
        if batch.first_ack is None:
            batch.first_ack = (ack.seq, now)
        batch.last_ack = (ack.seq, now)
        batch.acks_total += 1
        batch.acks_pending += 1
        batch.highest_ack = max(batch.highest_ack, ack.seq)
        if ack.msgs != batch.flow:
            events.append(BatchEvent(
                f"fi.{batch.batch_id}.flow.{ack.seq}.{ack.msgs}", EventKind.FAST_FLOW_CHANGED, now, batch.stream,
                batch.batch_id, gap_mode=batch.gap_mode, flow=ack.msgs, previous_flow=batch.flow, seq=ack.seq,
            ))
            batch.flow = ack.msgs

    def _on_puback(self, where: FastReplySubject, batch: TrackedBatch | None, ack: PubAck,
                   now: datetime) -> list[BatchEvent]:
        events: list[BatchEvent] = []
        if batch is not None:
            if batch.stream is None and batch.last_problem is not None and ack.stream:
                # Its gaps or errors went out under no stream: from here on they are the stream's.
                events.append(BatchEvent(f"fi.{where.batch_id}.attributed", EventKind.FAST_ATTRIBUTED, now,
                                         ack.stream, where.batch_id, gap_mode=where.gap_mode.value))
            batch.stream = ack.stream
            events += self._flush_progress(batch, now)
            self._forget(where.batch_id)
        common = dict(stream=ack.stream, count=ack.count, stream_seq=ack.seq, seq=where.seq)
        committed = where.op in (FastOp.COMMIT, FastOp.EOB) and not _short(where, ack)
        self._close(where.batch_id, "committed" if committed else "ended")
        if committed:
            events.append(self._event(where, now, EventKind.FAST_COMMITTED, "committed", batch,
                                      eob=where.op is FastOp.EOB, **common))
        else:  # unasked-for, or short of the commit (the commit itself the gap): fail mode ended the batch
            reason = (batch.last_problem if batch else None) or "gap"
            events.append(self._event(where, now, EventKind.FAST_ENDED_EARLY, "ended", batch, reason=reason, **common))
        return events

    def _flush_progress(self, batch: TrackedBatch, now: datetime) -> list[BatchEvent]:
        batch.last_progress = now
        if not batch.acks_pending:
            return []
        acks, batch.acks_pending = batch.acks_pending, 0
        return [BatchEvent(
            f"fi.{batch.batch_id}.progress.{batch.acks_total}", EventKind.FAST_PROGRESS, now, batch.stream,
            batch.batch_id, gap_mode=batch.gap_mode, flow=batch.flow, seq=batch.highest_ack, acks=acks,
        )]

    @staticmethod
    def _event(where: FastReplySubject, now: datetime, kind: EventKind, suffix: str,
               batch: TrackedBatch | None, **fields: Any) -> BatchEvent:
        fields.setdefault("stream", batch.stream if batch else None)
        fields.setdefault("gap_mode", where.gap_mode.value)
        return BatchEvent(f"fi.{where.batch_id}.{suffix}", kind, now, batch_id=where.batch_id, **fields)


def _short(where: FastReplySubject, ack: PubAck) -> bool:
    """A fail-mode PubAck on a commit's reply that counts fewer messages than the commit's: the server ended
    the batch at a gap the commit itself made (what it stored before it), not the commit (an EOB is not counted)."""
    whole = where.seq if where.op is FastOp.COMMIT else where.seq - 1
    return where.gap_mode is GapMode.FAIL and ack.count is not None and ack.count < whole
