"""Finds one lost batch and the events around it: where it was lost (the live hour in memory, else the
history tables), then the event log's minutes either side of that moment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from console.alerting.rules_file import remedies
from console.broker.eventlog import EventLog
from console.domain.events import EventKind
from console.domain.incident import AROUND, Incident, build_incident
from console.domain.live_model import LiveModel, lost_batch
from console.domain.reasons import OTHER, is_known
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


def advice(incident: Incident) -> str | None:
    """What to do about this loss: the remedy of the shipped rule that covers its reason."""
    loss = incident.loss
    if loss.kind is EventKind.FAST_GAP:
        return remedies().get(("lost_messages", "")) or remedies().get(("lost_messages", "gap"))
    reason = lost_batch(loss).reason
    return remedies().get(("lost_batches", reason if is_known(reason) else OTHER))


async def find_incident(log: EventLog, batch_id: str, *, model: LiveModel | None = None,
                        history: Reader | None = None, around: timedelta = AROUND) -> Incident | None:
    seen = sighting(batch_id, model, history)
    if seen is None:
        return None
    events = [e for _, e in await log.window(seen.time - around, seen.time + around)]
    return build_incident(batch_id, events, around)
