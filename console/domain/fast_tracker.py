"""What the `$FI` reply side says about other clients' fast batches: a state machine per batch.

Pure: the collector feeds it (subject, body, time) for every tapped reply and calls tick()
every interval. Memory is bounded: a batch is forgotten after its outcome or after it is
inferred dropped. A tracked batch is never evicted to admit another: past `max_batches`, or past a
quarter of them under one reply prefix (one publisher, or one forger), a new batch is not tracked
(counted in `untracked`, and per prefix in `refused`), but its start, gaps, errors and outcome are
still reported, since those need no state.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from console.domain.events import BatchEvent, EventKind
from console.domain.fast_ingest import MAX_FLOW, FastOp, FastReplySubject
from console.domain.wire import Tally
from console.domain.replies import ApiError, FlowAck, FlowError, FlowGap, MalformedReply, PubAck, to_reply


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


# The server's flow ack, byte for byte (nats-server 2.14+). Anything else takes the full parser.
# Digits bounded so the values stay in int64 and in the flow range without another check.
_PLAIN_ACK = re.compile(rb'\{"type":"ack","seq":(\d{1,18}),"msgs":(\d{1,5})\}')


class FastBatchTracker:
    def __init__(self, batch_timeout: float = 10.0, max_batches: int = 10_000, progress_interval: float = 1.0):
        self.batch_timeout = batch_timeout
        self.max_batches = max_batches
        self.progress_interval = progress_interval
        self.batches: dict[str, TrackedBatch] = {}
        self.max_per_prefix = max(1, max_batches // 4)
        self._per_prefix: Counter[str] = Counter()
        self.untracked = 0
        self.refused = Tally()  # reply prefix -> batches not tracked

    def observe(self, subject: str, data: bytes, now: datetime) -> list[BatchEvent]:
        """One tapped reply. Raises InvalidReplySubject or MalformedReply for the caller to count."""
        # Fast path, most of the traffic at low flows: a plain flow ack of a batch already tracked
        # (its subject was validated when the batch was first seen).
        if (plain := _PLAIN_ACK.fullmatch(data)) is not None and 1 <= int(plain[2]) <= MAX_FLOW:
            tokens = subject.rsplit(".", 6)
            if len(tokens) == 7 and tokens[6] == "$FI" and (known := self.batches.get(tokens[1])) is not None:
                events: list[BatchEvent] = []
                self._on_ack(known, FlowAck(int(plain[1]), int(plain[2])), now, events)
                return events
        where = FastReplySubject.parse(subject)
        reply = to_reply(data)
        batch = self.batches.get(where.batch_id)
        events: list[BatchEvent] = []
        if isinstance(reply, FlowAck):
            if batch is None:
                batch = self._track(where, reply, now, events)
            if batch is not None:
                self._on_ack(batch, reply, now, events)
        elif isinstance(reply, FlowGap):
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
            events += self._on_puback(where, batch, reply, now)
        elif isinstance(reply, ApiError):
            if batch:
                events += self._flush_progress(batch, now)
                self._forget(where.batch_id)
            events.append(self._event(where, now, EventKind.FAST_ERROR, f"err.{where.seq}.{reply.err_code}", batch,
                                      stream=reply.stream, seq=where.seq, err_code=reply.err_code,
                                      description=reply.description))
        else:
            raise MalformedReply("an empty reply on a $FI subject")
        return events

    def observe_publish(self, subject: str, reply: str, now: datetime) -> tuple[list[BatchEvent], TrackedBatch | None]:
        """One message of the publish side (opt-in tap): keeps a quiet batch alive and learns its subject.
        Returns the events and the batch it touched (None: not tracked). Raises InvalidReplySubject
        for the caller to count."""
        where = FastReplySubject.parse(reply)
        batch = self.batches.get(where.batch_id)
        events: list[BatchEvent] = []
        if batch is None:
            if where.op is not FastOp.START:
                return events, None
            # Granted flow is not known until the first ack; a different grant shows as a flow change.
            batch = self._admit(where, where.flow, now)
            events.append(self._event(where, now, EventKind.FAST_STARTED, "started", batch, flow=where.flow,
                                      previous_flow=where.flow, detail=f"seen publishing on {subject}"
                                      + ("" if batch else " (not tracked: tracker full)")))
            if batch is None:
                return events, None
        batch.last_seen = now
        batch.subject = subject
        return events, batch

    def set_stream(self, batch_id: str, stream: str) -> None:
        if (batch := self.batches.get(batch_id)) is not None and batch.stream is None:
            batch.stream = stream

    def tick(self, now: datetime) -> list[BatchEvent]:
        """Fold pending acks into progress events; infer drops of batches silent past the timeout."""
        events: list[BatchEvent] = []
        for batch_id, batch in list(self.batches.items()):
            idle = (now - batch.last_seen).total_seconds()
            if (now - batch.last_progress).total_seconds() >= self.progress_interval or idle > self.batch_timeout:
                events += self._flush_progress(batch, now)
            if idle > self.batch_timeout:
                self._forget(batch_id)
                events.append(BatchEvent(
                    f"fi.{batch_id}.dropped", EventKind.FAST_DROPPED, now, batch.stream, batch_id,
                    gap_mode=batch.gap_mode, flow=batch.flow, seq=batch.highest_ack, inferred=True,
                    detail=f"no reply seen for {idle:.1f}s (batch timeout {self.batch_timeout:g}s)",
                ))
        return events

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

    def _forget(self, batch_id: str) -> None:
        if (batch := self.batches.pop(batch_id, None)) is not None:
            self._per_prefix[batch.prefix] -= 1
            if not self._per_prefix[batch.prefix]:
                del self._per_prefix[batch.prefix]

    def _track(self, where: FastReplySubject, ack: FlowAck, now: datetime, events: list) -> TrackedBatch | None:
        batch = self._admit(where, ack.msgs, now)
        joined_late = where.op is not FastOp.START
        detail = "first seen mid-batch" if joined_late else None
        if batch is None:
            detail = "not tracked: tracker full" + (", first seen mid-batch" if joined_late else "")
        events.append(self._event(where, now, EventKind.FAST_STARTED, "started", batch, flow=ack.msgs,
                                  previous_flow=where.flow, inferred=joined_late, detail=detail))
        return batch

    def _on_ack(self, batch: TrackedBatch, ack: FlowAck, now: datetime, events: list) -> None:
        batch.last_seen = now
        batch.acks_total += 1
        batch.acks_pending += 1
        batch.highest_ack = max(batch.highest_ack, ack.seq)
        if ack.msgs != batch.flow:
            events.append(BatchEvent(
                f"fi.{batch.batch_id}.flow.{ack.seq}.{ack.msgs}", EventKind.FAST_FLOW_CHANGED, now, batch.stream,
                batch.batch_id, gap_mode=batch.gap_mode, flow=ack.msgs, previous_flow=batch.flow, seq=ack.seq,
            ))
            batch.flow = ack.msgs

    def _on_puback(self, where: FastReplySubject, batch: TrackedBatch | None, ack: PubAck, now: datetime) -> list:
        events: list[BatchEvent] = []
        if batch is not None:
            batch.stream = ack.stream
            events += self._flush_progress(batch, now)
            self._forget(where.batch_id)
        common = dict(stream=ack.stream, count=ack.count, stream_seq=ack.seq, seq=where.seq)
        if where.op in (FastOp.COMMIT, FastOp.EOB):
            events.append(self._event(where, now, EventKind.FAST_COMMITTED, "committed", batch,
                                      eob=where.op is FastOp.EOB, **common))
        else:  # unasked-for: fail mode ended the batch
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
               batch: TrackedBatch | None, **fields) -> BatchEvent:
        fields.setdefault("stream", batch.stream if batch else None)
        fields.setdefault("gap_mode", where.gap_mode.value)
        return BatchEvent(f"fi.{where.batch_id}.{suffix}", kind, now, batch_id=where.batch_id, **fields)
