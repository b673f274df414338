"""The console's event log: one versioned, flat event type for every observation.

Flat on purpose: the same fields are the JSON in the log, the Spark schema and the SQLite
columns. `event_id` is deterministic (derived from what was observed), so a redelivered input
makes the same id and the event log's Nats-Msg-Id dedup drops the copy.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from operator import attrgetter
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Callable

import orjson

from console.domain.fast_ingest import MAX_FLOW
from console.domain.publisher import Publisher, publisher_from_dict
from console.domain.wire import (
    INT64_MAX,
    MAX_LABEL,
    MalformedInput,
    batch_id,
    bounded_int,
    bounded_text,
    bounded_time,
    load_object,
    stream_name,
)

SCHEMA_VERSION = 1
# A stream not known (yet): one spelling on every page, in every table and in every export.
UNKNOWN_STREAM = "(unknown)"
WHY_UNKNOWN = ("the server names a fast batch's stream only in its final PubAck; tap the publish side "
               "(--tap-publish-side) to know it earlier")
SUBJECT_UNKNOWN = "_unknown"  # the event log's subject token for it (a subject token, kept as it was)

# Where an event came from. Only the system account's copy of an advisory cannot come from an
# ordinary client of the account; the others can be forged on the wire (the collector checks them).
SYSTEM_ADVISORY = "system_advisory"
ACCOUNT_ADVISORY = "account_advisory"
FI_TAP = "fi_tap"
PUBLISH_TAP = "publish_tap"
COLLECTOR = "collector"
SOURCES = (SYSTEM_ADVISORY, ACCOUNT_ADVISORY, FI_TAP, PUBLISH_TAP, COLLECTOR)


class EventKind(str, Enum):
    ATOMIC_ABANDONED = "atomic_abandoned"
    FAST_STARTED = "fast_started"
    FAST_PROGRESS = "fast_progress"  # flow acks folded per batch per interval
    FAST_FLOW_CHANGED = "fast_flow_changed"
    FAST_GAP = "fast_gap"
    FAST_ERROR = "fast_error"
    FAST_COMMITTED = "fast_committed"
    FAST_ENDED_EARLY = "fast_ended_early"  # fail mode: a gap (reason "gap") or an error ended it
    FAST_DROPPED = "fast_dropped"  # inferred: silent past the batch timeout while an ack was due
    FAST_SLOW = "fast_slow"  # silent past the batch timeout, but its cadence says no ack was due: cannot tell
    FAST_LOST = "fast_lost"  # answered 10208 (batch unknown): a leader change, or the server forgot it
    FAST_REJECTED = "fast_rejected"  # refused with 10211: too many fast batches in flight
    ATOMIC_REJECTED = "atomic_rejected"  # a tapped atomic batch refused with 10210: too many in flight
    ATOMIC_LOST = "atomic_lost"  # a tapped atomic batch that can no longer commit, with no advisory
    ATOMIC_OPEN_DROPPED = "atomic_open_dropped"  # a stream event that drops open atomic batches unseen
    LOSS_RETRACTED = "loss_retracted"  # a reply came for a batch reported lost: the inference was wrong
    # A fast batch whose gaps or errors were recorded before any reply named its stream, now named
    # (its PubAck): its earlier events belong to `stream`.
    FAST_ATTRIBUTED = "fast_attributed"
    CONTEXT = "context"  # stream created/updated/deleted, leader elected, consumer actions
    CAPTURE_INTERRUPTED = "capture_interrupted"  # a window in which the server may have dropped advisories
    COLLECTOR_STATUS = "collector_status"
    CONFORMANCE = "conformance"  # a client's verdict against ADR-50 (detail: its JSON; publisher: who)
    BATCH_MESSAGES = "batch_messages"  # a lost batch's first and last messages from the publish side (kept_messages)
    CANARY = "canary"  # one canary batch's result (console.domain.canary; detail: its JSON)
    STREAM_TOTALS = "stream_totals"  # the streams' last sequences, and atomic batches seen (detail: its JSON; budgets)
    MAINTENANCE = "maintenance"  # a maintenance begun or ended (console.domain.maintenance_record; detail: its JSON)
    NODE_STOPPED = "node_stopped"  # a server's lame duck or shutdown notice (console.domain.node_stops; detail: its name)
    COPY_SPLIT = "copy_split"  # a committed atomic batch whose copy (a mirror, a hub's source) holds part of it (copies)
    CONSUMER_LAG = "consumer_lag"  # every consumer's lag at one read of the alerts part (console.domain.consumer_lag)
    MANIFEST = "manifest"  # a lost batch's manifest, at each change of its state (console.domain.manifests; detail: its JSON)

    def __str__(self) -> str:
        return self.value


# A batch lost: abandoned or lost without an advisory (atomic); ended by a gap or an error (fast,
# fail mode), dropped idle, or unknown to the stream's leader (fast).
LOST_KINDS = (EventKind.ATOMIC_ABANDONED, EventKind.ATOMIC_LOST, EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED,
              EventKind.FAST_LOST)
ATOMIC_KINDS = (EventKind.ATOMIC_ABANDONED, EventKind.ATOMIC_LOST)
FAST_ENDS = (EventKind.FAST_COMMITTED, EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED, EventKind.FAST_LOST)
# What the collector says of itself, of clients, of streams and of a lost batch's messages, not of
# batches: never in History's loss tables (the loss budgets count stream totals).
NOT_HISTORY = (EventKind.COLLECTOR_STATUS, EventKind.CONFORMANCE, EventKind.BATCH_MESSAGES, EventKind.STREAM_TOTALS,
               EventKind.CANARY, EventKind.NODE_STOPPED, EventKind.COPY_SPLIT, EventKind.CONSUMER_LAG,
               EventKind.MANIFEST)


@dataclass(frozen=True, slots=True)
class BatchEvent:
    event_id: str
    kind: EventKind
    time: datetime
    stream: str | None = None  # None: not known (yet); never guessed
    batch_id: str | None = None
    reason: str | None = None  # abandon reason; context: the advisory's action
    gap_mode: str | None = None
    flow: int | None = None
    previous_flow: int | None = None
    seq: int | None = None  # batch sequence the event is about
    first_lost_seq: int | None = None
    lost: int | None = None
    acks: int | None = None
    err_code: int | None = None
    description: str | None = None
    count: int | None = None  # PubAck count
    stream_seq: int | None = None  # PubAck seq
    eob: bool | None = None
    inferred: bool = False
    account: str | None = None
    domain: str | None = None
    detail: str | None = None  # context: advisory type / consumer; status: JSON of the counters
    source: str | None = None  # one of SOURCES
    # With system-account access: an advisory the system account never sent (possibly forged).
    unverified: bool = False
    publisher: Publisher | None = None  # the connection that published the batch, as CONNZ knows it
    # When `stream` is not known: the stream this publisher's connection last published a batch to.
    probable_stream: str | None = None
    cluster: str | None = None  # in a supercluster: the cluster whose tap heard it, or the stream's
    v: int = SCHEMA_VERSION

    def subject(self, prefix: str) -> str:
        """`<prefix>.<kind>.<stream>`: a reader can filter by kind and by stream."""
        return f"{prefix}.{self.kind.value}.{self.stream or SUBJECT_UNKNOWN}"

    def to_record(self) -> dict[str, Any]:
        """The event as its JSON holds it: only the fields set."""
        out: dict[str, Any] = {}
        for key, value in zip(_FIELDS, _values(self)):
            if value is None or (value is False and key in _FLAGS):  # a flag is written only when raised
                continue
            if type(value) in _PLAIN:  # most of them, told at once
                pass
            elif isinstance(value, Publisher):
                value = value.to_dict()
            elif isinstance(value, datetime):
                value = _utc_text(value)
            elif isinstance(value, Enum):
                value = value.value
            out[key] = value
        return out

    def to_json(self) -> bytes:
        return dump_record(self.to_record())

    def but(self, **changes: Any) -> BatchEvent:
        """A copy with these fields changed: dataclasses.replace's, without its cost (it runs a frozen
        __init__ of every field again, the most of an event's cost in the collector's writer)."""
        copy = object.__new__(BatchEvent)
        for slot, value in zip(_SLOTS, _values(self)):
            slot.__set__(copy, value)
        for key, value in changes.items():
            if key not in _FIELD_SET:
                raise TypeError(f"BatchEvent has no field {key!r}")
            object.__setattr__(copy, key, value)
        return copy


_FIELDS = tuple(BatchEvent.__dataclass_fields__)
_FIELD_SET = frozenset(_FIELDS)
_SLOTS = tuple(getattr(BatchEvent, key) for key in _FIELDS)  # each field's slot, set past the frozen guard
_FLAGS = frozenset({"inferred", "unverified"})
_PLAIN = frozenset({str, int, bool})  # written as they are (a str subclass, an Enum, is not among them)
_values = attrgetter(*_FIELDS)


_last_time: tuple[datetime | None, str] = (None, "")


def _utc_text(time: datetime) -> str:
    """A time as the event's JSON holds it; the last one's text again for the same time (a tick's events
    share theirs)."""
    global _last_time
    if (last := _last_time)[0] is time:  # read once: another thread may set it meanwhile
        return last[1]
    text = time.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    _last_time = (time, text)
    return text


def dump_record(record: dict[str, Any]) -> bytes:
    """A record's JSON, compact; the standard library's where orjson refuses (a lone surrogate in a text) or
    where it would write null for a number that is not finite: the record's Infinity or NaN is written as
    the standard library writes it, which readers read back as it was (and refuse or keep as `refusal`
    says), never turned into a null that reads as no value."""
    try:
        body = orjson.dumps(record)
        if b"null" not in body or not _non_finite(record):  # a record holds no None: a null is a number
            return body
    except (TypeError, orjson.JSONEncodeError):
        pass
    return json.dumps(record, separators=(",", ":")).encode()


def _non_finite(value: object, depth: int = 0) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth < 64 and isinstance(value, dict):
        return any(_non_finite(v, depth + 1) for v in value.values())
    if depth < 64 and isinstance(value, (list, tuple)):
        return any(_non_finite(v, depth + 1) for v in value)
    return False


STREAM_LEADER_ELECTED = "stream_leader_elected"  # a context event's detail for that advisory
UNTIL = "until="  # a capture_interrupted event's detail: until=<ISO time> (the event's time is the start)


def blind_window(event: BatchEvent) -> tuple[datetime, datetime] | None:
    """(from, to) when the event records a window in which losses may be missing."""
    if event.kind is not EventKind.CAPTURE_INTERRUPTED or not (event.detail or "").startswith(UNTIL):
        return None
    try:
        until = datetime.fromisoformat((event.detail or "")[len(UNTIL):].replace("Z", "+00:00"))
    except ValueError:
        return None
    if until.tzinfo is None or until < event.time:
        return None
    return event.time, until


def capture_interrupted(instance: str, start: datetime, end: datetime, why: str) -> BatchEvent:
    return BatchEvent(f"capture-interrupted.{instance}.{start.timestamp():.3f}", EventKind.CAPTURE_INTERRUPTED, start,
                      reason=why[:MAX_LABEL], detail=UNTIL + end.astimezone(timezone.utc).isoformat().replace("+00:00", "Z"),
                      description="losses in this window may be missing")


def elected_leader(event: BatchEvent) -> str | None:
    """The new leader when the event is a stream's leader election (its stream is event.stream)."""
    if event.kind is EventKind.CONTEXT and event.stream and (event.detail or "").startswith(STREAM_LEADER_ELECTED):
        return event.reason or "?"
    return None


class MalformedEvent(MalformedInput):
    what = "console event"


MAX_EVENT = 64 * 1024  # bytes; a status event with every counter is a few KiB
_FLOW = (1, MAX_FLOW)
_SEQUENCE = (0, INT64_MAX)
# field -> how to read it from the JSON (None: absent). Fields not named here are ignored.
_READERS: dict[str, Callable[[object], Any]] = {
    "stream": lambda v: stream_name(v, error=MalformedEvent),
    "batch_id": lambda v: batch_id(v, "batch_id", MalformedEvent),
    "reason": lambda v: bounded_text(v, "reason", error=MalformedEvent),
    "gap_mode": lambda v: _one_of(v, "gap_mode", ("ok", "fail")),
    "flow": lambda v: bounded_int(v, "flow", *_FLOW, MalformedEvent),
    "previous_flow": lambda v: bounded_int(v, "previous_flow", *_FLOW, MalformedEvent),
    "err_code": lambda v: bounded_int(v, "err_code", 0, 2**31 - 1, MalformedEvent),
    "description": lambda v: bounded_text(v, "description", error=MalformedEvent),
    "eob": lambda v: _bool(v, "eob"),
    "inferred": lambda v: _bool(v, "inferred"),
    "account": lambda v: bounded_text(v, "account", MAX_LABEL, MalformedEvent),
    "domain": lambda v: bounded_text(v, "domain", MAX_LABEL, MalformedEvent),
    "detail": lambda v: _long_text(v, "detail"),
    "source": lambda v: _one_of(v, "source", SOURCES),
    "unverified": lambda v: _bool(v, "unverified"),
    "publisher": lambda v: publisher_from_dict(v, MalformedEvent),
    "probable_stream": lambda v: stream_name(v, error=MalformedEvent),
    "cluster": lambda v: bounded_text(v, "cluster", MAX_LABEL, MalformedEvent),
    **{key: (lambda k: lambda v: bounded_int(v, k, *_SEQUENCE, MalformedEvent))(key)
       for key in ("seq", "first_lost_seq", "lost", "acks", "count", "stream_seq")},
}


def _one_of(value: object, key: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise MalformedEvent(f"{key!r} is not one of {', '.join(allowed)}")
    assert isinstance(value, str)  # one of `allowed`
    return value


def _bool(value: object, key: str) -> bool:
    if type(value) is not bool:
        raise MalformedEvent(f"{key!r} is not true or false")
    return value


def _long_text(value: object, key: str) -> str:
    """Free text that never reaches a subject or a header (a status's JSON): only its size is checked."""
    if not isinstance(value, str) or len(value) > MAX_EVENT:
        raise MalformedEvent(f"{key!r} is not a string of at most {MAX_EVENT} characters")
    return value


def event_from_json(data: bytes | str) -> BatchEvent:
    """Read an event back, total: MalformedEvent for anything that is not a sane console event."""
    event_id, kind, time, version, values = _checked(load_object(data, MalformedEvent, MAX_EVENT))
    return BatchEvent(event_id, kind, time, v=version, **values)


def refusal(record: dict[str, Any], size: int) -> str | None:
    """Why readers would refuse this record of `size` bytes as JSON (event_from_json), or None."""
    try:
        if size > MAX_EVENT:
            raise MalformedEvent(f"{size} bytes, past {MAX_EVENT}")
        _checked(record)
    except MalformedEvent as e:
        return e.reason
    return None


def _checked(obj: dict[str, Any]) -> tuple[str, EventKind, datetime, int, dict[str, Any]]:
    """An event's fields read from its JSON object: (id, kind, time, schema version, the rest)."""
    version = bounded_int(obj.get("v", 0), "v", 0, 2**31 - 1, MalformedEvent)
    if version > SCHEMA_VERSION:
        raise MalformedEvent(f"event schema v{version} is newer than this console (v{SCHEMA_VERSION})")
    try:
        kind = EventKind(obj.get("kind"))
    except ValueError:
        raise MalformedEvent(f"unknown kind {str(obj.get('kind'))[:64]!r}") from None
    try:
        time = datetime.fromisoformat(bounded_text(obj.get("time"), "time", 64, MalformedEvent).replace("Z", "+00:00"))
    except ValueError as e:
        raise MalformedEvent(f"'time': {e}") from None
    values: dict[str, Any] = {key: read(value) for key, value in obj.items()
                              if value is not None and (read := _READERS.get(key)) is not None}
    if values.get("first_lost_seq") is not None and values.get("seq") is not None \
            and values["first_lost_seq"] >= values["seq"]:
        raise MalformedEvent("'first_lost_seq' is not below 'seq'")
    return (bounded_text(obj.get("event_id"), "event_id", 256, MalformedEvent), kind, bounded_time(time, MalformedEvent),
            version, values)


MSG_ID = "Nats-Msg-Id"
REPLAYED = "replayed"  # a record whose identity was stored before, or stored under another id


STATUS_UNVERIFIED = "forged: bad signature (collector status)"  # the reason that tells a wrong key


class KeyTally:
    """Whether a reader's key is the collector's: the collector signs its status every few seconds, so
    when statuses arrive and no event at all verifies, the key is wrong (a forger's few statuses beside
    events that verify are forgeries, not a wrong key; a log that also holds an older key's events, from
    before a rotation, is not wrong while the current key's events verify)."""

    def __init__(self) -> None:
        self.verified = 0
        self.unverified = 0

    def take(self, event: BatchEvent | None, reason: str | None) -> None:
        if event is not None:
            self.verified += 1
        elif reason == STATUS_UNVERIFIED:
            self.unverified += 1

    @property
    def wrong(self) -> bool:
        return self.unverified >= 1 and self.verified == 0


def key_mismatch(source: str) -> str:
    """What to say when the collector's own events do not verify with the key from `source`."""
    return (f"event key wrong: the collector's own status events do not verify with the key from {source}, so "
            "every event it writes is dropped as forged. Use the collector's key: point --event-key-file (or "
            "BATCH_CONSOLE_DATA_DIR) at the collector's data directory's event.key")


def verified_event(key: bytes | None, data: bytes, headers: dict[str, str] | None,
                   system: str | None = None) -> BatchEvent:
    """One record of the event log as its reader must take it, total: MalformedEvent when it is not
    an event the collector signed (with `key`, for `system` where it reads a systems file's system's log),
    or when it is stored under another identity than the one it carries. The signature covers the body and the body holds the event id; the log dedups on
    the Nats-Msg-Id header, so a copy republished under a new message id is a replay, never an event."""
    from console.domain.signing import forgery

    if key is not None and (forged := forgery(key, data, headers, system)):
        if forged.endswith("bad signature") and _is_status(data):
            raise MalformedEvent(STATUS_UNVERIFIED)
        raise MalformedEvent(forged)
    event = event_from_json(data)
    if (headers or {}).get(MSG_ID) != event.event_id:
        raise MalformedEvent(f"{REPLAYED}: stored under another message id")
    return event


def _is_status(data: bytes) -> bool:
    try:
        return event_from_json(data).kind is EventKind.COLLECTOR_STATUS
    except MalformedEvent:
        return False


class RecentIds:
    """The event ids a reader has taken, the newest `size` of them: a record whose id is among them
    is a copy (a replay, or a genuine duplicate stored after the log's duplicate window)."""

    def __init__(self, size: int = 200_000):
        self.size = size
        self._ids: dict[str, None] = {}  # insertion-ordered: the oldest goes first

    def repeat(self, event_id: str) -> bool:
        """True when `event_id` was taken before; otherwise takes it."""
        if event_id in self._ids:
            return True
        self._ids[event_id] = None
        if len(self._ids) > self.size:
            del self._ids[next(iter(self._ids))]
        return False
