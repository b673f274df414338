"""Live as one reader may see it: the process's live model (or several systems' as one), read through
the reader's sight, so that the Live page, the stream page and the notebooks show a role limited to
some streams those streams' losses, counts and warnings alone. The model is shared by every session;
this view holds nothing of its own."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from console.domain.live_across import LiveAcross
from console.domain.live_model import ActiveBatch, LiveModel, LostBatch, Sees


class SeenLive:
    def __init__(self, model: LiveModel | LiveAcross, sees: Sees):
        self._model, self._sees = model, sees

    def __getattr__(self, name: str) -> Any:  # what concerns no stream: the collector, freshness, the version
        return getattr(self._model, name)

    @property
    def active(self) -> dict[Any, ActiveBatch]:
        return {key: b for key, b in self._model.active.items() if self._sees(b.stream)}

    @property
    def warnings(self) -> list[Any]:
        return [e for e in getattr(self._model, "warnings", ()) if self._sees(e.stream)]

    @property
    def rejected(self) -> Counter[str]:
        return Counter({s: n for s, n in getattr(self._model, "rejected", Counter()).items() if self._sees(s)})

    def newest_first(self, limit: int = 100, per_stream: int = 10) -> list[LostBatch]:
        return self._model.newest_first(limit, per_stream, self._sees)

    def lost_on(self, stream: str, limit: int = 100) -> list[LostBatch]:
        return self._model.lost_on(stream, limit) if self._sees(stream) else []

    def find_lost(self, batch_id: str) -> LostBatch | None:
        found = getattr(self._model, "find_lost")(batch_id)  # a page of one system's model asks
        return found if found is not None and self._sees(found.stream) else None

    def active_newest_first(self) -> list[ActiveBatch]:
        return self._model.active_newest_first(self._sees)

    def counts_by_reason(self, now: datetime, within: timedelta) -> Counter[str]:
        return self._model.counts_by_reason(now, within, self._sees)

    def per_interval(self, now: datetime, interval: timedelta, intervals: int) -> dict[str, list[int]]:
        return self._model.per_interval(now, interval, intervals, self._sees)
