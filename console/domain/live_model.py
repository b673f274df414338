"""What the Live page shows, folded from events: pure, bounded, one instance per web process.

The web process follows the event log (backfill, then live) and apply()s each event; views read
snapshots at a few Hz. Every collection is bounded: recent abandonments by count, counters by
time window, flow points per batch by count, active batches by count.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from console.domain.events import BatchEvent, EventKind

LOST_KINDS = (EventKind.ATOMIC_ABANDONED, EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED)
ENDED_KINDS = (EventKind.FAST_COMMITTED, EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED)
# An error alone (10208 after a fail-mode end, 10211 refused at the start) is not an active batch.
OPENING_KINDS = (EventKind.FAST_STARTED, EventKind.FAST_PROGRESS, EventKind.FAST_FLOW_CHANGED, EventKind.FAST_GAP)


@dataclass(frozen=True)
class LostBatch:
    time: datetime
    stream: str | None
    batch_id: str | None
    reason: str
    kind: str  # atomic | fast
    event_id: str


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
    flow_points: deque = field(default_factory=lambda: deque(maxlen=600))  # (time, flow)
    gap_points: deque = field(default_factory=lambda: deque(maxlen=100))  # (time, seq, lost)


def lost_batch(event: BatchEvent) -> LostBatch:
    kind = "atomic" if event.kind is EventKind.ATOMIC_ABANDONED else "fast"
    reason = "dropped" if event.kind is EventKind.FAST_DROPPED else (event.reason or "unknown")
    return LostBatch(event.time, event.stream, event.batch_id, reason, kind, event.event_id)


class LiveModel:
    def __init__(self, recent: int = 500, max_active: int = 200, window: timedelta = timedelta(hours=1)):
        self.recent: deque[LostBatch] = deque(maxlen=recent)  # newest last
        self.window = window
        self.max_active = max_active
        self.active: dict[str, ActiveBatch] = {}
        self.collector: dict = {}
        self.collector_seen: datetime | None = None
        self.last_event: datetime | None = None
        self.events_applied = 0
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
        if event.kind is EventKind.COLLECTOR_STATUS:
            self.collector = json.loads(event.detail or "{}")
            self.collector_seen = event.time
            return
        if event.kind in LOST_KINDS:
            self.recent.append(lost_batch(event))
        if event.kind.value.startswith("fast_") and event.batch_id:
            self._fast(event)

    def _remember(self, event_id: str) -> None:
        if len(self._seen_ids) == self._seen_ids.maxlen:
            self._seen_set.discard(self._seen_ids[0])
        self._seen_ids.append(event_id)
        self._seen_set.add(event_id)

    def _fast(self, event: BatchEvent) -> None:
        if event.kind in ENDED_KINDS:
            self.active.pop(event.batch_id, None)
            self._ended.append(event.batch_id)
            return
        batch = self.active.get(event.batch_id)
        if batch is None:
            if event.kind not in OPENING_KINDS or event.batch_id in self._ended:
                return
            if len(self.active) >= self.max_active:  # the oldest quiet batch makes room
                oldest = min(self.active.values(), key=lambda b: b.last_event)
                del self.active[oldest.batch_id]
            batch = self.active[event.batch_id] = ActiveBatch(event.batch_id, event.stream, event.gap_mode, event.flow)
        batch.last_event = event.time
        batch.stream = batch.stream or event.stream
        if event.flow is not None:
            batch.flow = event.flow
            batch.flow_points.append((event.time, event.flow))
        if event.seq is not None:
            batch.last_seq = max(batch.last_seq, event.seq)
            if event.kind is EventKind.FAST_PROGRESS:
                batch.acked_seq = max(batch.acked_seq, event.seq)
        if event.kind is EventKind.FAST_GAP:
            batch.gaps += 1
            batch.lost += event.lost or 0
            batch.gap_points.append((event.time, event.seq, event.lost))

    # -- reads for the views ---------------------------------------------------------------

    def counts_by_reason(self, now: datetime, within: timedelta) -> Counter[str]:
        since = now - within
        return Counter(b.reason for b in self.recent if b.time >= since)

    def active_newest_first(self) -> list[ActiveBatch]:
        """Active fast batches, the most recently heard from first."""
        return sorted(self.active.values(), key=lambda b: b.last_event, reverse=True)

    def newest_first(self, limit: int = 100) -> list[LostBatch]:
        return list(reversed(self.recent))[:limit]

    def per_interval(self, now: datetime, interval: timedelta, intervals: int) -> dict[str, list[int]]:
        """reason -> counts per interval, oldest interval first, ending at now."""
        start = now - interval * intervals
        series: dict[str, list[int]] = {}
        for b in self.recent:
            if start <= b.time < now:
                slot = int((b.time - start) / interval)
                series.setdefault(b.reason, [0] * intervals)[slot] += 1
        return series

    def freshness(self, now: datetime) -> timedelta | None:
        return None if self.last_event is None else now - self.last_event

    def collector_alive(self, now: datetime, every: float = 5.0) -> bool:
        """Alive if a status event arrived within three of its intervals."""
        return self.collector_seen is not None and (now - self.collector_seen).total_seconds() <= 3 * every
