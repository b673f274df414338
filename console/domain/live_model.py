"""What the Live page shows, folded from events: pure, bounded, one instance per web process.

The web process follows the event log (backfill, then live) and apply()s each event; views read
snapshots at a few Hz. Every collection is bounded: lost batches by count per stream and kind (so
a flood on one stream cannot push another's loss out), counters by second over the window (so
they are counts, not the length of a list), flow points per batch, active batches by count.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Callable

from console.domain.advisories import META_RESCUE
from console.domain.conformance import Verdicts
from console.domain.events import (ATOMIC_KINDS, LOST_KINDS, SYSTEM_ADVISORY, UNKNOWN_STREAM, BatchEvent, EventKind,
                                   blind_window)
from console.domain.fast_tracker import SLOW_GIVE_UP
from console.domain.maintenance_record import MaintenanceRecord, maintenance_record
from console.domain.status import CollectorStatus
from console.domain.wire import MalformedInput

Sees = Callable[[str | None], bool]  # whether a reader sees a stream (console.queries.sight)


def ALL(stream: str | None) -> bool:
    return True

ENDED_KINDS = (EventKind.FAST_COMMITTED, EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED, EventKind.FAST_LOST,
               EventKind.FAST_REJECTED)
# An error alone (10208 after a fail-mode end, 10211 refused at the start) is not an active batch.
OPENING_KINDS = (EventKind.FAST_STARTED, EventKind.FAST_PROGRESS, EventKind.FAST_FLOW_CHANGED, EventKind.FAST_GAP)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # a batch not heard from yet sorts oldest
# Past its batch timeout and this, a batch the collector tracks has been said slow or dropped: one still
# quiet is one it does not track (a gap of a batch whose start it never saw, or a forger's), not active.
QUIET_GRACE = timedelta(seconds=10)


@dataclass(frozen=True)
class LostBatch:
    time: datetime
    stream: str | None
    batch_id: str | None
    reason: str
    kind: str  # atomic | fast
    event_id: str
    unverified: bool = False  # the system account never sent this abandonment
    source: str | None = None  # where the collector saw it (events.SOURCES): losses are kept per source
    publisher: str | None = None  # the publishing connection, in one line, when CONNZ named it
    probable_stream: str | None = None  # when stream is not known: where this publisher last published
    system: str = ""  # the NATS system whose event log said it (its model's; README, "Several NATS systems")
    cluster: str | None = None  # in a supercluster: the cluster it happened in
    maintenance: str | None = None  # it happened inside this maintenance's window (its label)
    domain: str | None = None  # the JetStream domain its advisory named (a leaf node's, say)


@dataclass
class ActiveBatch:
    batch_id: str
    stream: str | None
    gap_mode: str | None
    flow: int | None
    acked_seq: int = 0
    last_seq: int = 0  # highest batch sequence the events mention
    gaps: int = 0
    lost: int = 0
    last_event: datetime | None = None
    slow: bool = False  # silent past the batch timeout with no ack due: slow, or dropped, cannot tell
    flow_points: deque[tuple[datetime, int]] = field(default_factory=lambda: deque(maxlen=600))  # (time, flow)
    gap_points: deque[tuple[datetime, int | None, int | None]] = field(
        default_factory=lambda: deque(maxlen=100))  # (time, seq, lost)
    system: str = ""


def loss_kind_and_reason(event: BatchEvent) -> tuple[str, str | None]:
    """A loss's batch kind (atomic | fast) and its reason as its event gives it ("dropped" for an inferred
    drop); the analytics job's rule too (console.analytics.transforms.with_abandonment_reason)."""
    return ("atomic" if event.kind in ATOMIC_KINDS else "fast",
            "dropped" if event.kind is EventKind.FAST_DROPPED else event.reason)


def lost_batch(event: BatchEvent, system: str = "") -> LostBatch:
    kind, reason = loss_kind_and_reason(event)
    reason = reason or "unknown"
    return LostBatch(event.time, event.stream, event.batch_id, reason, kind, event.event_id, event.unverified,
                     event.source, event.publisher.line() if event.publisher else None, event.probable_stream, system,
                     event.cluster, domain=event.domain)


class LiveModel:
    def __init__(self, recent: int = 50, max_active: int = 200, window: timedelta = timedelta(hours=1),
                 max_streams: int = 1000, system: str = ""):
        """recent: lost batches kept per stream, kind and source (a flood of forged advisories on a stream
        cannot push out the losses the system account or the tap saw); max_streams: how many such keys;
        system: the NATS system whose event log this model follows, on each batch it holds."""
        self.system = system
        self.recent_per_stream = recent
        self.max_streams = max_streams
        # (order applied, loss), newest last in each: equal times are ordered by arrival
        self._lost: dict[tuple[str | None, str, str | None], deque[tuple[int, LostBatch]]] = {}
        # epoch second -> (stream, reason) -> losses: a reader limited to some streams counts theirs alone
        self._per_second: dict[int, Counter[tuple[str | None, str]]] = {}
        self.window = window
        self.max_active = max_active
        self.active: dict[str, ActiveBatch] = {}
        self.collector: CollectorStatus | None = None
        self.conformance = Verdicts()  # the clients' latest verdicts, as the collector wrote them
        self.collector_seen: datetime | None = None
        self.last_event: datetime | None = None
        self.events_applied = 0
        self.retracted = 0  # losses a later reply showed were not losses
        self.warnings: deque[BatchEvent] = deque(maxlen=20)  # open atomic batches dropped unseen, batches copied split
        self.blind_windows: deque[tuple[datetime, datetime, str]] = deque(maxlen=20)  # (from, to, why): see capture_watch
        self.maintenances: dict[str, MaintenanceRecord] = {}  # by id, the newest 20: a loss inside one is marked
        self.rescues: deque[BatchEvent] = deque(maxlen=5)  # the meta group's quorum lowered (2.15), as the system said
        self.quiet_retired = 0  # active batches left out once quiet past what the collector would judge
        self.rejected: Counter[str] = Counter()  # stream -> fast batches refused for too many in flight (429)
        self.version = 0  # bumps on every change: views redraw only when it moved
        self._ended: deque[str] = deque(maxlen=1000)  # late events of these do not reopen them
        self._seen_ids: deque[str] = deque(maxlen=10_000)
        self._seen_set: set[str] = set()

    def apply(self, event: BatchEvent) -> None:
        if event.event_id in self._seen_set:  # a follower restarted over the same range
            return
        self._remember(event.event_id)
        self.events_applied += 1
        self.version += 1
        self.last_event = max(self.last_event, event.time) if self.last_event else event.time
        if event.kind is EventKind.CONFORMANCE:
            self.conformance.apply(event)
            return
        if event.kind in (EventKind.BATCH_MESSAGES, EventKind.STREAM_TOTALS, EventKind.CANARY,  # their own pages'
                          EventKind.NODE_STOPPED, EventKind.CONSUMER_LAG, EventKind.MANIFEST):
            return
        if event.kind is EventKind.MAINTENANCE:
            self._maintenance(event)
            return
        if event.kind is EventKind.CONTEXT and event.reason == META_RESCUE and event.stream is None:
            if event.source == SYSTEM_ADVISORY:  # only the system account hears the real one
                self.rescues.append(event)
            return
        if event.kind is EventKind.COLLECTOR_STATUS:
            if self.collector_seen is not None and event.time < self.collector_seen:
                return  # an older status stored late (a copy, a backlog) never overrides a newer one
            try:
                self.collector, self.collector_seen = CollectorStatus.from_json(event.detail or ""), event.time
            except MalformedInput:
                pass
            self._retire_quiet(self.last_event)
            return
        if event.kind in LOST_KINDS:
            lost = lost_batch(event, self.system)
            inside = next((m for m in reversed(self.maintenances.values()) if m.covers(lost.time)), None)
            self._keep_lost(replace(lost, maintenance=inside.label()) if inside else lost)
        elif event.kind is EventKind.LOSS_RETRACTED and event.batch_id:
            self._retract(event.batch_id)
            return
        elif event.kind is EventKind.FAST_ATTRIBUTED and event.batch_id and event.stream:
            self._attribute(event.batch_id, event.stream)
        elif event.kind in (EventKind.ATOMIC_OPEN_DROPPED, EventKind.COPY_SPLIT):  # no loss: what the operator must see
            self.warnings.append(event)
            return
        elif (window := blind_window(event)) is not None:
            self.blind_windows.append((*window, event.reason or ""))
            return
        if event.kind in (EventKind.FAST_REJECTED, EventKind.ATOMIC_REJECTED):
            self.rejected[event.stream or UNKNOWN_STREAM] += 1
            if len(self.rejected) > self.max_streams:
                del self.rejected[min(self.rejected, key=lambda s: self.rejected[s])]
        if event.kind.value.startswith("fast_") and event.batch_id:
            self._fast(event)

    def _maintenance(self, event: BatchEvent) -> None:
        try:
            record = maintenance_record(event)
        except MalformedInput:
            return
        self.maintenances.pop(record.id, None)
        self.maintenances[record.id] = record
        while len(self.maintenances) > 20:
            del self.maintenances[next(iter(self.maintenances))]

    def _keep_lost(self, lost: LostBatch) -> None:
        key = (lost.stream, lost.kind, lost.source)
        if key not in self._lost and len(self._lost) >= self.max_streams:  # the stream lost longest ago goes
            del self._lost[min(self._lost, key=lambda k: self._lost[k][-1][1].time)]
        self._lost.setdefault(key, deque(maxlen=self.recent_per_stream)).append((self.events_applied, lost))
        second = int(lost.time.timestamp())
        self._per_second.setdefault(second, Counter())[lost.stream, lost.reason] += 1
        newest = self.last_event or lost.time
        horizon = int(newest.timestamp() - self.window.total_seconds()) - 1
        if len(self._per_second) > self.window.total_seconds() + 60:
            for old in [s for s in self._per_second if s < horizon]:
                del self._per_second[old]

    def _attribute(self, batch_id: str, stream: str) -> None:
        """A batch's losses recorded under no stream are its stream's."""
        for key in [k for k in self._lost if k[0] is None]:
            moved = [b for _, b in self._lost[key] if b.batch_id == batch_id]
            if not moved:
                continue
            self._lost[key] = deque(((o, b) for o, b in self._lost[key] if b.batch_id != batch_id),
                                    maxlen=self.recent_per_stream)
            target = self._lost.setdefault((stream, key[1], key[2]), deque(maxlen=self.recent_per_stream))
            target.extend((self.events_applied, replace(b, stream=stream)) for b in moved)
            for b in moved:  # counted under its stream from now on
                counts = self._per_second.get(int(b.time.timestamp()))
                if counts and counts[None, b.reason] > 0:
                    counts[None, b.reason] -= 1
                    counts[stream, b.reason] += 1

    def _retract(self, batch_id: str) -> None:
        """A fast batch reported lost was not: out of the lists and the counts. It may come back as active."""
        for key, entries in self._lost.items():
            gone = [b for _, b in entries if b.batch_id == batch_id and b.kind == "fast"]
            if not gone:
                continue
            self._lost[key] = deque(((o, b) for o, b in entries if b not in gone), maxlen=entries.maxlen)
            for b in gone:
                counts = self._per_second.get(int(b.time.timestamp()))
                if counts and counts[key[0], b.reason] > 0:
                    counts[key[0], b.reason] -= 1
                self.retracted += 1
        if batch_id in self._ended:
            self._ended.remove(batch_id)

    def _remember(self, event_id: str) -> None:
        if len(self._seen_ids) == self._seen_ids.maxlen:
            self._seen_set.discard(self._seen_ids[0])
        self._seen_ids.append(event_id)
        self._seen_set.add(event_id)

    def _fast(self, event: BatchEvent) -> None:
        assert event.batch_id is not None  # apply() sends only a fast event with a batch id
        if event.kind in ENDED_KINDS:
            self.active.pop(event.batch_id, None)
            self._ended.append(event.batch_id)
            return
        batch = self.active.get(event.batch_id)
        if batch is None:
            if event.kind not in OPENING_KINDS or event.batch_id in self._ended:
                return
            if len(self.active) >= self.max_active:  # the oldest quiet batch makes room
                oldest = min(self.active.values(), key=lambda b: b.last_event or EPOCH)
                del self.active[oldest.batch_id]
            batch = self.active[event.batch_id] = ActiveBatch(event.batch_id, event.stream, event.gap_mode, event.flow,
                                                               system=self.system)
        batch.last_event = event.time
        batch.stream = batch.stream or event.stream
        if event.flow is not None:
            batch.flow = event.flow
            batch.flow_points.append((event.time, event.flow))
        if event.seq is not None:
            batch.last_seq = max(batch.last_seq, event.seq)
            if event.kind is EventKind.FAST_PROGRESS:
                batch.acked_seq = max(batch.acked_seq, event.seq)
        batch.slow = event.kind is EventKind.FAST_SLOW
        if event.kind is EventKind.FAST_GAP:
            batch.gaps += 1
            batch.lost += event.lost or 0
            batch.gap_points.append((event.time, event.seq, event.lost))

    def _retire_quiet(self, now: datetime) -> None:
        """Out of the active list: batches not heard from since the collector would have judged them
        (a status comes every few seconds, so this runs when nothing else happens too)."""
        timeout = self.collector.batch_timeout if self.collector else 10.0
        timeout = timeout if 1 <= timeout <= 3600 else 10.0  # a status is read from the wire: any number
        quiet = now - timedelta(seconds=timeout) - QUIET_GRACE
        given_up = quiet - timedelta(seconds=SLOW_GIVE_UP)  # a slow batch is forgotten, unsaid, after this
        for batch_id, batch in list(self.active.items()):
            if (batch.last_event or EPOCH) < (given_up if batch.slow else quiet):
                del self.active[batch_id]
                self.quiet_retired += 1
                self.version += 1

    # -- reads for the views ---------------------------------------------------------------

    def counts_by_reason(self, now: datetime, within: timedelta, sees: Sees = ALL) -> Counter[str]:
        """Losses by reason between now - within and now (of the streams `sees`): counts, whatever the flood."""
        low, high = (now - within).timestamp(), now.timestamp()
        total: Counter[str] = Counter()
        for second, counts in self._per_second.items():
            if low <= second <= high:
                for (stream, reason), n in counts.items():
                    if sees(stream):
                        total[reason] += n
        return +total

    def active_newest_first(self, sees: Sees = ALL) -> list[ActiveBatch]:
        """Active fast batches (a running one's stream is not named yet: every reader's), the most
        recently heard from first."""
        return sorted((b for b in self.active.values() if sees(b.stream)), key=lambda b: b.last_event or EPOCH,
                      reverse=True)

    def newest_first(self, limit: int = 100, per_stream: int = 10, sees: Sees = ALL) -> list[LostBatch]:
        """The newest lost batches (of the streams `sees`), at most per_stream from each stream and kind,
        so that a flood on one stream leaves room for the others."""
        candidates = (entry for key, lost in self._lost.items() if sees(key[0]) for entry in list(lost)[-per_stream:])
        return [b for _, b in heapq.nlargest(limit, candidates, key=lambda entry: (entry[1].time, entry[0]))]

    def lost_on(self, stream: str, limit: int = 100) -> list[LostBatch]:
        """The newest lost batches of one stream (every kind the model holds)."""
        found = [entry for key, lost in self._lost.items() if key[0] == stream for entry in lost]
        return [b for _, b in heapq.nlargest(limit, found, key=lambda entry: (entry[1].time, entry[0]))]

    def lost_batches(self) -> int:
        return sum(len(lost) for lost in self._lost.values())

    def find_lost(self, batch_id: str) -> LostBatch | None:
        """The newest loss of this batch the model still holds."""
        found = [b for lost in self._lost.values() for _, b in lost if b.batch_id == batch_id]
        return max(found, key=lambda b: b.time, default=None)

    def per_interval(self, now: datetime, interval: timedelta, intervals: int, sees: Sees = ALL) -> dict[str, list[int]]:
        """reason -> counts per interval (of the streams `sees`), oldest interval first, ending at now."""
        start = (now - interval * intervals).timestamp()
        width = interval.total_seconds()
        series: dict[str, list[int]] = {}
        for second, counts in self._per_second.items():
            slot = int((second - start) // width)
            if 0 <= slot < intervals:
                for (stream, reason), n in counts.items():
                    if n and sees(stream):
                        series.setdefault(reason, [0] * intervals)[slot] += n
        return series

    def freshness(self, now: datetime) -> timedelta | None:
        return None if self.last_event is None else now - self.last_event

    def collector_heard(self, now: datetime, every: float = 5.0) -> bool:
        """A status event arrived within three of its intervals."""
        return self.collector_seen is not None and (now - self.collector_seen).total_seconds() <= 3 * every

    def collector_state(self, now: datetime) -> str:
        """silent | alive | unhealthy: what the status bar and the header say of the collector."""
        if not self.collector_heard(now):
            return "silent"
        return "alive" if self.collector_alive(now) else "unhealthy"

    def collector_alive(self, now: datetime, every: float = 5.0) -> bool:
        """Heard from, and its own verdict on its loops is healthy (an older collector says nothing)."""
        return self.collector_heard(now, every) and self.collector is not None and self.collector.healthy
