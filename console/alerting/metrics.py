"""Prometheus metrics of the event log, with bounded labels: streams are the only open label, and
past MAX_STREAMS of them the rest are folded into "other"."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from console.domain.events import LOST_KINDS, UNKNOWN_STREAM, BatchEvent, EventKind
from console.domain.live_model import lost_batch

MAX_STREAMS = 1000
OTHER = "other"


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.lost_batches = Counter("batch_console_lost_batches", "Batches lost", ["stream", "kind", "reason"], registry=r)
        self.lost_messages = Counter("batch_console_fast_lost_messages", "Fast-ingest messages lost in gaps",
                                     ["stream"], registry=r)
        self.gaps = Counter("batch_console_fast_gaps", "Fast-ingest gaps", ["stream", "gap_mode"], registry=r)
        self.fast_batches = Counter("batch_console_fast_batches", "Fast batches by outcome", ["stream", "outcome"],
                                    registry=r)
        self.rejected = Counter("batch_console_rejected", "Batches refused for too many in flight",
                                ["stream", "err_code"], registry=r)
        self.collector_up = Gauge("batch_console_collector_up", "1 while the collector reports healthy", registry=r)
        self.lag = Gauge("batch_console_event_log_lag_seconds", "Age of the newest event read", registry=r)
        self.firing = Gauge("batch_console_alerts_firing", "Alerts firing", ["rule", "severity"], registry=r)
        self._streams: set[str] = set()

    def stream(self, name: str | None) -> str:
        name = name or UNKNOWN_STREAM
        if name in self._streams:
            return name
        if len(self._streams) >= MAX_STREAMS:
            return OTHER
        self._streams.add(name)
        return name

    def observe(self, event: BatchEvent) -> None:
        kind = event.kind
        if kind in LOST_KINDS:
            lost = lost_batch(event)
            self.lost_batches.labels(self.stream(event.stream), lost.kind, lost.reason).inc()
        if kind is EventKind.FAST_GAP:
            stream = self.stream(event.stream)
            self.gaps.labels(stream, event.gap_mode or "").inc()
            self.lost_messages.labels(stream).inc(event.lost or 0)
        outcome = {EventKind.FAST_COMMITTED: "committed", EventKind.FAST_ENDED_EARLY: "ended_early",
                   EventKind.FAST_DROPPED: "dropped", EventKind.FAST_LOST: "lost"}.get(kind)
        if outcome:
            self.fast_batches.labels(self.stream(event.stream), outcome).inc()
        if kind in (EventKind.FAST_REJECTED, EventKind.ATOMIC_REJECTED):
            self.rejected.labels(self.stream(event.stream), str(event.err_code)).inc()
