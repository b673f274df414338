"""Finds one lost batch and the events around it: where it was lost (the live hour in memory, else the
history tables), then the event log's minutes either side of that moment."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from console.alerting.rules_file import remedies
from console.broker.eventlog import EventLog
from console.domain.events import EventKind
from console.domain.incident import AROUND, Incident, build_incident
from console.domain.kept_messages import ShownMessage
from console.domain.live_model import LiveModel, lost_batch
from console.domain.reasons import OTHER, is_known
from console.storage.history import Reader

if TYPE_CHECKING:
    from console.decoders.rules import Decoders
    from console.domain.masking import Masking


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



def shown_messages(incident: Incident, level: str, masking: Masking, decoders: Decoders | None) -> list[ShownMessage]:
    """The batch's kept first and last messages as a viewer whose roles see `level` of its stream's payloads
    may see them: none for a role without payloads (or with payloads off); else as kept, which the rules
    masked already; decoded by the stream's decoder as Replay decodes."""
    from console.decoders.rules import decode_message
    from console.domain.messages import PREVIEW_BYTES, preview
    from console.domain.roles import NONE

    stream, shown = incident.loss.stream or "", []
    for m in incident.messages:
        hidden = level == NONE or not masking.payloads
        headers, data = masking.apply(stream, m.headers, m.data, level, m.subject) if hidden else (m.headers, m.data)
        cut = " (the rest not kept)" if m.cut else ""
        decoded = None if hidden else decode_message(decoders, stream, m.subject, dict(headers), data)
        if decoded is not None and decoded.error is None:
            text = json.dumps(decoded.value, indent=2, ensure_ascii=False, default=_plain)[:PREVIEW_BYTES]
            shown.append(ShownMessage(m.place, m.seq, m.subject, headers, text,
                                      f"{decoded.decoder}, {m.size} bytes{cut}"))
            continue
        p = preview(data)
        shown.append(ShownMessage(m.place, m.seq, m.subject, headers, html.unescape(p.text),
                                  f"{p.kind}, {m.size} bytes{cut}",
                                  None if decoded is None else f"not decoded as {decoded.decoder}: {decoded.error}"))
    return shown


def _plain(value: object) -> object:
    import base64

    return {"base64": base64.b64encode(value).decode()} if isinstance(value, bytes) else str(value)
