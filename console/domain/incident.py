"""One lost batch and what surrounded it: the pure part of the incident view and its report."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from console.domain.events import (
    ATOMIC_KINDS,
    LOST_KINDS,
    UNKNOWN_STREAM,
    UNTIL,
    BatchEvent,
    EventKind,
    elected_leader,
)

LOSS_KINDS = (*LOST_KINDS, EventKind.FAST_GAP)  # a gap in ok mode loses messages, not the batch
NOT_CONTEXT = (EventKind.COLLECTOR_STATUS, EventKind.FAST_PROGRESS)
AROUND = timedelta(minutes=5)


@dataclass(frozen=True)
class Incident:
    loss: BatchEvent  # the abandonment, or the fast batch's end, drop or first gap
    seen_by_tap: tuple[BatchEvent, ...]  # the batch's own fast-ingest events
    context: tuple[BatchEvent, ...]  # the same stream's (and unknown streams') events in the window
    around: timedelta

    @property
    def start(self) -> datetime:
        return self.loss.time - self.around

    @property
    def end(self) -> datetime:
        return self.loss.time + self.around


def build_incident(batch_id: str, events: list[BatchEvent], around: timedelta = AROUND) -> Incident | None:
    """From the events of a window around the batch; None when none of them is the batch's loss."""
    losses = [e for e in events if e.batch_id == batch_id and e.kind in LOSS_KINDS]
    if not losses:
        return None
    loss = min(losses, key=lambda e: (LOSS_KINDS.index(e.kind), e.time))
    start, end = loss.time - around, loss.time + around
    own = tuple(e for e in events if e.batch_id == batch_id and e is not loss)
    context = tuple(e for e in events
                    if e.batch_id != batch_id and e.kind not in NOT_CONTEXT and start <= e.time <= end
                    and (e.stream in (loss.stream, None) or loss.stream is None))
    return Incident(loss, own, context, around)


def describe(e: BatchEvent) -> str:
    """One line a person reads; values as they came (the page escapes them)."""
    kind = e.kind.value.replace("_", " ")
    parts = {
        EventKind.ATOMIC_ABANDONED: f"reason {e.reason}",
        EventKind.FAST_STARTED: f"flow {e.flow}, gap mode {e.gap_mode}",
        EventKind.FAST_FLOW_CHANGED: f"flow {e.previous_flow} -> {e.flow}",
        EventKind.FAST_GAP: f"lost {e.lost} from seq {e.first_lost_seq} (at seq {e.seq})",
        EventKind.FAST_ERROR: f"seq {e.seq}: [{e.err_code}] {e.description}",
        EventKind.FAST_COMMITTED: f"count {e.count}, stream seq {e.stream_seq}" + (", EOB" if e.eob else ""),
        EventKind.FAST_ENDED_EARLY: f"reason {e.reason}",
        EventKind.FAST_DROPPED: "silent past the batch timeout" + (" (inferred)" if e.inferred else ""),
        EventKind.FAST_LOST: f"reason {e.reason}: {e.detail or ''}",
        EventKind.FAST_SLOW: e.detail or "",
        EventKind.FAST_REJECTED: f"[{e.err_code}] {e.description}",
        EventKind.ATOMIC_REJECTED: f"[{e.err_code}] {e.description}",
        EventKind.ATOMIC_LOST: f"reason {e.reason}" + (f": {e.detail}" if e.detail else ""),
        EventKind.ATOMIC_OPEN_DROPPED: f"reason {e.reason}: {e.detail or ''}",
        EventKind.LOSS_RETRACTED: f"not lost after all ({e.detail or e.reason})",
        EventKind.CONTEXT: f"{e.reason or ''} {e.detail or ''}".strip(),
        EventKind.CAPTURE_INTERRUPTED: f"until {e.detail[len(UNTIL):] if e.detail else '?'}: losses in this window "
                                       f"may be missing ({e.reason or ''})",
    }.get(e.kind, "")
    batch = f" batch {e.batch_id}" if e.batch_id else ""
    return f"{kind}{batch}" + (f": {parts}" if parts else "")


def timeline(incident: Incident) -> list[tuple[datetime, str, str]]:
    """(time, stream, what) for the loss, the tap's view of it and the context, in time order. A
    stream leader election names the leader before it when the window holds the one before."""
    leaders: dict[str | None, str] = {}
    rows = []
    for e in sorted((incident.loss, *incident.seen_by_tap, *incident.context), key=lambda e: e.time):
        what = describe(e)
        if (leader := elected_leader(e)) is not None:
            before = leaders.get(e.stream)
            what = f"stream leader elected: {leader}" + (f" (was {before})" if before and before != leader else "")
            leaders[e.stream] = leader
        rows.append((e.time, e.stream or UNKNOWN_STREAM, ("▶ " if e is incident.loss else "") + what))
    return rows


# What acts anywhere in a line; wire text never starts one, so "-", "#" and "1." stay as they are.
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def md(text: object) -> str:
    """Text from the wire, inert in Markdown: no HTML, no emphasis, links or table breaks."""
    return _MARKDOWN.sub(r"\\\1", html.escape(str(text), quote=False)).replace("\n", " ").replace("\r", " ")


def incident_report(incident: Incident, replay_link: str | None = None) -> str:
    loss = incident.loss
    lines = [
        f"# Incident: batch {md(loss.batch_id)}",
        "",
        f"- **What**: {md(describe(loss))}",
        f"- **Stream**: {md(loss.stream or UNKNOWN_STREAM)}",
        f"- **When**: {loss.time.isoformat()}",
    ]
    if loss.account:
        lines.append(f"- **Account**: {md(loss.account)}")
    lines.append(f"- **Event id**: {md(loss.event_id)}")
    if replay_link:
        lines.append(f"- **Stream messages in the window**: {replay_link}")
    lines += ["", f"## Timeline ({incident.around.total_seconds() / 60:g} minutes either side)", "",
              "| time | stream | event |", "|---|---|---|"]
    lines += [f"| {t.isoformat()} | {md(s)} | {md(what)} |" for t, s, what in timeline(incident)]
    if not incident.seen_by_tap:
        lines += ["", "The fast-ingest tap saw nothing of this batch (atomic batches have no `$FI` traffic)."
                  if loss.kind in ATOMIC_KINDS else "The tap saw nothing else of this batch."]
    return "\n".join(lines) + "\n"
