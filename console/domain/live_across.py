"""Live across several NATS systems: one view over each system's live model, read as one model is
(the Live page draws either). Each batch carries its system (the model that holds it names it), so
the merged lists keep it; counts are summed, newest first is merged by time."""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime, timedelta
from typing import Callable

from console.domain.live_model import ALL, EPOCH, ActiveBatch, LiveModel, LostBatch, Sees


class LiveAcross:
    def __init__(self, models: Callable[[], dict[str, LiveModel]]):
        """models: the systems' live models now (a system not reached yet has none)."""
        self.models = models

    @property
    def version(self) -> tuple[tuple[str, int], ...]:
        """Changes when any model changes, and when a system joins."""
        return tuple((name, model.version) for name, model in self.models().items())

    @property
    def active(self) -> dict[tuple[str, str], ActiveBatch]:
        return {(name, batch_id): b for name, model in self.models().items() for batch_id, b in model.active.items()}

    def newest_first(self, limit: int = 100, per_stream: int = 10, sees: Sees = ALL) -> list[LostBatch]:
        found = (b for model in self.models().values() for b in model.newest_first(limit, per_stream, sees))
        return heapq.nlargest(limit, found, key=lambda b: b.time)

    def lost_on(self, stream: str, limit: int = 100) -> list[LostBatch]:
        found = (b for model in self.models().values() for b in model.lost_on(stream, limit))
        return heapq.nlargest(limit, found, key=lambda b: b.time)

    def active_newest_first(self, sees: Sees = ALL) -> list[ActiveBatch]:
        return sorted((b for b in self.active.values() if sees(b.stream)), key=lambda b: b.last_event or EPOCH,
                      reverse=True)

    def counts_by_reason(self, now: datetime, within: timedelta, sees: Sees = ALL) -> Counter[str]:
        total: Counter[str] = Counter()
        for model in self.models().values():
            total.update(model.counts_by_reason(now, within, sees))
        return total

    def per_interval(self, now: datetime, interval: timedelta, intervals: int, sees: Sees = ALL) -> dict[str, list[int]]:
        series: dict[str, list[int]] = {}
        for model in self.models().values():
            for reason, counts in model.per_interval(now, interval, intervals, sees).items():
                summed = series.setdefault(reason, [0] * intervals)
                for i, n in enumerate(counts):
                    summed[i] += n
        return series
