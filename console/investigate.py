"""Finds one lost batch and the events around it: where it was lost (the live hour in memory, else the
history tables), then the event log's minutes either side of that moment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from console.broker.eventlog import EventLog
from console.domain.incident import AROUND, Incident, build_incident
from console.domain.live_model import LiveModel
from console.storage.history import Reader


@dataclass(frozen=True)
class Sighting:
    time: datetime
    stream: str | None


def sighting(batch_id: str, model: LiveModel | None, history: Reader | None) -> Sighting | None:
    if model is not None:
        if (lost := model.find_lost(batch_id)) is not None:
            return Sighting(lost.time, lost.stream)
    if history is not None:
        found = history.abandoned_batches(batch_id=batch_id, limit=1)
        if len(found):
            return Sighting(found.time.iloc[0].to_pydatetime(), found.stream.iloc[0])
    return None


async def find_incident(log: EventLog, batch_id: str, *, model: LiveModel | None = None,
                        history: Reader | None = None, around: timedelta = AROUND) -> Incident | None:
    seen = sighting(batch_id, model, history)
    if seen is None:
        return None
    events = [e for _, e in await log.window(seen.time - around, seen.time + around)]
    return build_incident(batch_id, events, around)

