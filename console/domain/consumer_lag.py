"""Consumer lag: what the server says of one consumer (its info, read totally: a reply on the wire is
hostile like any byte), and what a trail of such reads says over a window, on Burrow's rules:

- **stalled**: its position (the ack floor) did not move over the whole window while messages waited
  (pending or unacknowledged at every read): nobody reads, or a reader holds messages it never acks;
- **lagging**: its position moves, but what waits grew at every read of the window (it falls behind);
- a burst being read is neither: the position moves, so it is no stall, and the wait stops growing as
  soon as the reader keeps up; **paused** (ADR-42) and **caught_up** say themselves; **ok** is the rest.

Lag in seconds is the age of the oldest message not yet delivered, from the stream's own timestamps
(the message's store time against the server's time of the read), never an estimate from rates."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping

from console.domain.batch_ledger import BatchCount
from console.domain.events import COLLECTOR, BatchEvent, EventKind
from console.domain.wire import (
    INT64_MAX, MalformedInput, bounded_int, bounded_time, consumer_name_problem, stream_name_problem,
)

STATES = ("stalled", "lagging", "paused", "ok", "caught_up")  # gravest first
TRENDS = ("falling_behind", "steady", "catching_up")
MAX_FILTERS = 8  # filter subjects whose next message is looked up (a consumer with more: lag not read)
KEEP_READS = 64  # reads of one consumer kept: a window of them, and the trend's
BATCH_ID, BATCH_SEQ, BATCH_COMMIT = "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"


class MalformedConsumer(MalformedInput):
    what = "consumer info"


@dataclass(frozen=True)
class ConsumerRead:
    """One consumer as one info read says it is."""

    stream: str
    name: str
    kind: str  # pull | push | ordered
    durable: bool
    filters: tuple[str, ...]
    ack_policy: str
    max_deliver: int  # -1: unlimited
    delivered_seq: int  # stream sequence of the last message delivered
    ack_floor_seq: int  # stream sequence below which every message is acknowledged
    pending: int  # not yet delivered
    ack_pending: int  # delivered, not acknowledged
    redelivered: int  # delivered more than once and not yet acknowledged
    waiting: int  # pull requests waiting
    paused: bool
    pause_remaining_s: float
    priority_groups: tuple[str, ...]
    pinned: tuple[str, ...]  # groups with a pinned client
    at: datetime  # the server's time of the read

    @property
    def key(self) -> tuple[str, str]:
        return self.stream, self.name

    @property
    def waits(self) -> int:
        return self.pending + self.ack_pending


def _count(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key, 0)
    return bounded_int(value, key, 0, INT64_MAX, MalformedConsumer)


def _seq(obj: Any, key: str) -> int:
    if obj is None:
        return 0
    if not isinstance(obj, dict):
        raise MalformedConsumer(f"{key!r} is not an object")
    return _count(obj, "stream_seq")


def server_time(value: object) -> datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise MalformedConsumer("a time that is not one")
    try:  # the server writes nanoseconds; Python reads at most microseconds
        head, _, rest = value.rstrip("Z").partition(".")
        fraction = "".join(c for c in rest if c.isdigit())[:6]
        parsed = datetime.fromisoformat(head + (f".{fraction}" if fraction else "") + "+00:00")
    except ValueError:
        raise MalformedConsumer("a time that is not one") from None
    return bounded_time(parsed, MalformedConsumer)


def _names(value: object, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > 256 or not all(isinstance(v, str) and 0 < len(v) <= 256 for v in value):
        raise MalformedConsumer(f"{key!r} is not a list of names")
    return tuple(value)


def parse_consumer(obj: object, stream: str | None = None) -> ConsumerRead:
    """One consumer info object (of CONSUMER.LIST or CONSUMER.INFO); MalformedConsumer for anything else."""
    if not isinstance(obj, dict):
        raise MalformedConsumer("not an object")
    config = obj.get("config")
    if not isinstance(config, dict):
        raise MalformedConsumer("no 'config' object")
    name, stream_name = obj.get("name"), obj.get("stream_name")
    if (problem := consumer_name_problem(name) or stream_name_problem(stream_name)) is not None:
        raise MalformedConsumer(problem)
    if stream is not None and stream_name != stream:
        raise MalformedConsumer("a consumer of another stream")
    assert isinstance(name, str) and isinstance(stream_name, str)  # the name checks refuse anything else
    filters = _names(config.get("filter_subjects"), "filter_subjects") or \
        _names([config["filter_subject"]] if config.get("filter_subject") else None, "filter_subject")
    ack = config.get("ack_policy", "none")
    if ack not in ("none", "all", "explicit", "flow_control"):
        raise MalformedConsumer("'ack_policy' is not one the server has")
    max_deliver = config.get("max_deliver", -1)
    max_deliver = -1 if max_deliver in (0, -1) else bounded_int(max_deliver, "max_deliver", 1, INT64_MAX, MalformedConsumer)
    remaining = obj.get("pause_remaining", 0)
    paused = obj.get("paused", False)
    groups = obj.get("priority_groups") or []
    if not isinstance(groups, list) or len(groups) > 256 or not all(isinstance(g, dict) for g in groups):
        raise MalformedConsumer("'priority_groups' is not a list of objects")
    durable = bool(config.get("durable_name"))
    push = bool(config.get("deliver_subject"))
    ordered = not durable and ack == "none" and config.get("mem_storage") is True
    return ConsumerRead(
        stream_name, name, "ordered" if ordered else "push" if push else "pull", durable, filters, ack, max_deliver,
        _seq(obj.get("delivered"), "delivered"), _seq(obj.get("ack_floor"), "ack_floor"),
        _count(obj, "num_pending"), _count(obj, "num_ack_pending"), _count(obj, "num_redelivered"),
        _count(obj, "num_waiting"), paused is True, bounded_int(remaining, "pause_remaining", 0, INT64_MAX, MalformedConsumer) / 1e9,
        _names(config.get("priority_groups"), "priority_groups"),
        tuple(str(g.get("group"))[:256] for g in groups if g.get("pinned_client_id")), server_time(obj.get("ts")))


@dataclass(frozen=True)
class NextMessage:
    """The oldest message a consumer has not been given (its store time), and where it sits in a batch."""

    seq: int
    time: datetime
    batch: str | None = None  # the atomic batch it belongs to
    batch_seq: int = 0  # its place in that batch (1: the batch's first)


@dataclass(frozen=True)
class Judged:
    """One consumer now: its read, what its trail says, and the figures a page shows."""

    read: ConsumerRead
    state: str
    trend: str | None  # None: one read only, no trend yet
    lag_seconds: float | None  # None: not read (more filters than looked up, or the message went away)
    catch_up_s: float | None  # at the current rate; None when it does not catch up (or has nothing to)
    why: str  # one line: what makes the state
    system: str = ""
    inside_batch: str | None = None  # the atomic batch its position sits inside (half of it read), or None
    read_of_batch: int = 0  # how many of that batch's messages it was given
    redelivering: bool = False  # the same messages given again over the whole window, its ack floor unmoved
    judged_over_s: float = 0.0  # seconds of reads behind the judgement (less than the window: no stall judged)
    domain: str = ""  # the JetStream domain of a leaf node's stream ("": the system's own)
    batches: BatchCount | None = None  # of an atomic stream: batches read whole and ahead (None: not counted)

    def as_json(self) -> dict[str, Any]:
        r = self.read
        batches = self.batches
        return {"system": self.system, "domain": self.domain or None, "stream": r.stream, "consumer": r.name, "kind": r.kind, "durable": r.durable,
                "pending": r.pending, "ack_pending": r.ack_pending, "redelivered": r.redelivered, "waiting": r.waiting,
                "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
                "state": self.state, "trend": self.trend,
                "catch_up_seconds": None if self.catch_up_s is None else round(self.catch_up_s, 1),
                "delivered_seq": r.delivered_seq, "ack_floor_seq": r.ack_floor_seq, "paused": r.paused,
                "pause_remaining_seconds": round(r.pause_remaining_s, 1), "max_deliver": r.max_deliver,
                "pinned_groups": list(r.pinned), "inside_batch": self.inside_batch,
                "read_of_batch": self.read_of_batch,
                "batches_read_whole": batches.read_whole if batches else None,
                "batches_ahead": batches.ahead if batches else None,
                "batches_counted_whole": batches.complete if batches else None,
                "redelivering": self.redelivering, "why": self.why}


@dataclass
class Trail:
    """The last reads of one consumer, oldest first (bounded)."""

    reads: deque[ConsumerRead] = field(default_factory=lambda: deque(maxlen=KEEP_READS))

    def add(self, read: ConsumerRead) -> None:
        if self.reads and read.at <= self.reads[-1].at:  # the same read twice, or one out of order
            return
        if self.reads and read.delivered_seq < self.reads[-1].delivered_seq:  # reset back: a new trail
            self.reads.clear()
        self.reads.append(read)

    def window(self, span: timedelta) -> list[ConsumerRead]:
        """The reads of the last `span`, and the one just before it (so the window is covered whole)."""
        if not self.reads:
            return []
        since = self.reads[-1].at - span
        inside = [r for r in self.reads if r.at >= since]
        before = [r for r in self.reads if r.at < since]
        return ([before[-1]] if before else []) + inside


def judge(trail: Trail, window: timedelta, next_message: NextMessage | None = None) -> Judged:
    """What a consumer's trail says now (its last read with the window before it)."""
    now = trail.reads[-1]
    reads = trail.window(window)
    covered = len(reads) >= 2 and now.at - reads[0].at >= window
    lag = _lag_seconds(now, next_message)
    trend, catch_up = _trend(reads)
    inside = next_message.batch if next_message and next_message.batch and next_message.batch_seq > 1 else None
    read_of = next_message.batch_seq - 1 if inside and next_message else 0

    floor_still = covered and len({r.ack_floor_seq for r in reads}) == 1
    redelivering = floor_still and all(r.redelivered > 0 for r in reads)
    over = (now.at - reads[0].at).total_seconds() if reads else 0.0

    def judged(state: str, why: str) -> Judged:
        return Judged(now, state, trend, lag, catch_up if state != "caught_up" else 0.0, why,
                      inside_batch=inside, read_of_batch=read_of, redelivering=redelivering, judged_over_s=over)

    if now.paused:
        return judged("paused", f"paused, {now.pause_remaining_s:.0f} s to go")
    if now.waits == 0:
        return judged("caught_up", "nothing waits")
    if floor_still and all(r.waits > 0 for r in reads) and len({r.delivered_seq for r in reads}) == 1:
        span = (now.at - reads[0].at).total_seconds()
        return judged("stalled", f"its position stayed at {now.ack_floor_seq} for {span:.0f} s while "
                                 f"{now.waits} messages waited")
    if covered and len(reads) >= 3 and all(b.pending > a.pending for a, b in zip(reads, reads[1:])):
        return judged("lagging", f"what waits grew at each of {len(reads)} reads, to {now.pending}")
    if trend is None:
        return judged("ok", "one read only: no trend yet")
    if not covered:
        return judged("ok", f"{over:.0f} s of reads: a stall is judged over {window.total_seconds():.0f} s")
    return judged("ok", "reading")


def _lag_seconds(now: ConsumerRead, next_message: NextMessage | None) -> float | None:
    if now.pending == 0:
        return 0.0
    if next_message is None:
        return None
    return max(0.0, (now.at - next_message.time).total_seconds())


def _trend(reads: list[ConsumerRead]) -> tuple[str | None, float | None]:
    """Whether what waits shrinks or grows over the reads, and the seconds to none left at that rate."""
    if len(reads) < 2:
        return None, None
    first, last = reads[0], reads[-1]
    seconds = (last.at - first.at).total_seconds()
    if seconds <= 0:
        return None, None
    rate = (last.pending - first.pending) / seconds  # messages a second: < 0 shrinks
    if first.pending == last.pending == 0:
        return "steady", None
    if last.pending == 0 or rate < 0 and abs(rate) * seconds >= 1:
        return "catching_up", last.pending / -rate if rate < 0 else 0.0
    if rate > 0 and rate * seconds >= 1:
        return "falling_behind", None
    return "steady", None


def gravest(judged: Iterable[Judged]) -> str:
    found = {j.state for j in judged}
    return next((s for s in STATES if s in found), "caught_up")


MAX_PAUSE = timedelta(days=366)


def given_time(text: object, key: str) -> datetime:
    """A time a person gives (ISO 8601; no zone: UTC); ValueError naming `key` for anything else."""
    if not isinstance(text, str) or not text.strip() or len(text) > 64 or any(not c.isprintable() for c in text):
        raise ValueError(f"{key} must be a time (ISO 8601), not {str(text)[:40]!r}")
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{key} must be a time (ISO 8601), not {text.strip()[:40]!r}") from None
    parsed = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
    try:
        return bounded_time(parsed)
    except MalformedInput as e:
        raise ValueError(f"{key}: {e.reason}") from None


def pause_end(until: datetime, now: datetime) -> datetime:
    """A pause's end as asked: in the future, within a year; ValueError else."""
    if until <= now:
        raise ValueError(f"a pause must end in the future, not at {until.isoformat()}")
    if until - now > MAX_PAUSE:
        raise ValueError("a pause of more than a year is a delete: pause for less")
    return until


RECORD_BYTES = 48 * 1024  # of one lag record's JSON: an event holds at most 64 KiB


def lag_records(judged: list[Judged], instance: str, now: datetime) -> list[BatchEvent]:
    """Every consumer's figures at one read, as events for History (the analytics job sums each consumer's
    hour): JSON rows {s: stream, c: consumer, p: pending, a: ack pending, l: lag seconds, st: state}, as many
    to an event as fit in RECORD_BYTES."""
    events: list[BatchEvent] = []
    rows: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal rows, size
        if rows:
            events.append(BatchEvent(f"consumer_lag.{instance}.{now.timestamp():.3f}.{len(events)}"[:200],
                                     EventKind.CONSUMER_LAG, now, detail="[" + ",".join(rows) + "]", source=COLLECTOR))
        rows, size = [], 0

    for j in judged:
        row = json.dumps({"s": j.read.stream, "c": j.read.name, "p": j.read.pending, "a": j.read.ack_pending,
                          "l": None if j.lag_seconds is None else round(j.lag_seconds, 3), "st": j.state},
                         separators=(",", ":"))
        if size + len(row) + 1 > RECORD_BYTES:
            flush()
        rows.append(row)
        size += len(row) + 1
    flush()
    return events
