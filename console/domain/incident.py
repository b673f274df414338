"""One lost batch and what surrounded it: the pure part of the incident view and its report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable

from console.domain.display import Clock, md
from console.domain.wire import printable
from console.domain.kept_messages import KeptMessage, ShownMessage, kept_messages
from console.domain.publisher import Publisher
from console.domain.manifests import Manifest, manifests_of
from console.domain.events import (
    ATOMIC_KINDS,
    LOST_KINDS,
    UNKNOWN_STREAM,
    UNTIL,
    BatchEvent,
    EventKind,
    MalformedEvent,
    elected_leader,
)

LOSS_KINDS = (*LOST_KINDS, EventKind.FAST_GAP)  # a gap in ok mode loses messages, not the batch
NOT_CONTEXT = (EventKind.COLLECTOR_STATUS, EventKind.CONFORMANCE, EventKind.FAST_PROGRESS, EventKind.BATCH_MESSAGES,
               EventKind.MANIFEST)
AROUND = timedelta(minutes=5)


@dataclass(frozen=True)
class Incident:
    loss: BatchEvent  # the abandonment, or the fast batch's end, drop or first gap
    seen_by_tap: tuple[BatchEvent, ...]  # the batch's own fast-ingest events
    context: tuple[BatchEvent, ...]  # the same stream's events, leader elections and blind windows in the window
    around: timedelta
    folded: tuple[tuple[str, int], ...] = ()  # the rest of the window, counted: ("flow changes on other streams", 214)
    messages: tuple[KeptMessage, ...] = ()  # its first and last, as the publish side saw them (when tapped)
    messages_problem: str | None = None  # a BATCH_MESSAGES event that could not be read
    manifest: Manifest | None = None  # what exactly it is missing, and its repair (console.domain.manifests)

    @property
    def start(self) -> datetime:
        return self.loss.time - self.around

    @property
    def publisher(self) -> Publisher | None:
        """The connection that published the batch, from any of its events that names it."""
        return self.loss.publisher or next((e.publisher for e in self.seen_by_tap if e.publisher), None)

    @property
    def end(self) -> datetime:
        return self.loss.time + self.around


def build_incident(batch_id: str, events: list[BatchEvent], around: timedelta = AROUND) -> Incident | None:
    """From the events of a window around the batch; None when none of them is the batch's loss."""
    losses = [e for e in events if e.batch_id == batch_id and e.kind in LOSS_KINDS]
    if not losses:
        return None
    loss = min(losses, key=lambda e: (LOSS_KINDS.index(e.kind), e.time))
    own = tuple(e for e in events if e.batch_id == batch_id and e is not loss
                and e.kind not in (EventKind.BATCH_MESSAGES, EventKind.MANIFEST))
    messages, problem = _kept(e for e in events if e.batch_id == batch_id and e.kind is EventKind.BATCH_MESSAGES)
    if loss.stream is None and (named := next((e.stream for e in own if e.stream), None)):
        loss = replace(loss, stream=named)  # a later event of the batch (its PubAck's) names the stream
    start, end = loss.time - around, loss.time + around
    nearby = [e for e in events if e.batch_id != batch_id and e.kind not in NOT_CONTEXT and start <= e.time <= end]
    context = tuple(e for e in nearby if _bears_on(e, loss))
    folded = Counter(_folded_as(e) for e in nearby if not _bears_on(e, loss))
    manifest = next(iter(manifests_of([e for e in events if e.batch_id == batch_id])), None)
    return Incident(loss, own, context, around, tuple(sorted(folded.items(), key=lambda f: (-f[1], f[0]))),
                    messages, problem, manifest)


UNANSWERED = ("no publisher taking part in the repair protocol has answered yet: only the batch's publisher holds "
              "these messages; have it send them again (its manifest is on batch_console.manifest.<stream>), or "
              "publish them from the stream page")


def manifest_lines(manifest: Manifest) -> list[str]:
    """What the batch is missing and its repair, in words (a page's paragraph, a report's section)."""
    why = manifest.why or (UNANSWERED if manifest.state == "open" else "")
    return [f"Missing: batch sequence(s) {manifest.missing_text()} ({manifest.certainty}): {manifest.rests_on}.",
            f"Repair: {manifest.state.replace('_', ' ')}" + (f" ({why})" if why else "")
            + (f"; sent again: {', '.join(s.text() for s in manifest.resent)}" if manifest.resent else "")
            + (f"; read back once: {', '.join(s.text() for s in manifest.found)}" if manifest.found else "") + "."]


def _kept(events: Iterable[BatchEvent]) -> tuple[tuple[KeptMessage, ...], str | None]:
    """The first readable BATCH_MESSAGES event's messages (copies of one event are the same)."""
    problem = None
    for event in events:
        try:
            return kept_messages(event), None
        except MalformedEvent as e:
            problem = f"the batch's kept messages could not be read: {e.reason}"
    return (), problem


def _bears_on(e: BatchEvent, loss: BatchEvent) -> bool:
    """Shown in the timeline: the same stream's events (when the loss's stream is known), every leader
    election and every blind window; the rest is folded into counts."""
    if elected_leader(e) is not None or e.kind is EventKind.CAPTURE_INTERRUPTED:
        return True
    return loss.stream is not None and e.stream == loss.stream


def _folded_as(e: BatchEvent) -> str:
    where = "on streams not yet known" if e.stream is None else "on other streams"
    return f"{e.kind.value.replace('_', ' ')} {where}"


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
    stream leader election names the leader before it when the window holds the one before. The
    batch's own rows start with ▶ (the loss) or ●."""
    return [(t, s, what) for t, s, what, _ in timeline_rows(incident)]


def timeline_rows(incident: Incident) -> list[tuple[datetime, str, str, bool]]:
    """timeline() with, for each row, whether it is the batch's own."""
    leaders: dict[str | None, str] = {}
    own = {id(e) for e in (incident.loss, *incident.seen_by_tap)}
    rows = []
    for e in sorted((incident.loss, *incident.seen_by_tap, *incident.context), key=lambda e: e.time):
        what = describe(e)
        if (leader := elected_leader(e)) is not None:
            before = leaders.get(e.stream)
            what = f"stream leader elected: {leader}" + (f" (was {before})" if before and before != leader else "")
            leaders[e.stream] = leader
        mark = "▶ " if e is incident.loss else "● " if id(e) in own else ""
        rows.append((e.time, e.stream or UNKNOWN_STREAM, mark + what, id(e) in own))
    return rows


def folded_lines(incident: Incident) -> list[str]:
    """The events of the window not shown, one counted line per kind: "214 fast flow changed on other streams"."""
    return [f"{n} {what}" for what, n in incident.folded]


def no_messages_why(incident: Incident) -> str:
    """Why the incident shows none of the batch's messages."""
    if incident.messages_problem:
        return incident.messages_problem
    stored = ("An abandoned atomic batch stores none of its messages" if incident.loss.kind in ATOMIC_KINDS else
              "A fast batch's stored messages carry no batch headers, so they cannot be told from others")
    return f"{stored}; the console keeps a lost batch's first and last messages when it taps the publish side " \
           "(--tap-publish-side), written a few seconds after the loss."


def message_lines(messages: list[ShownMessage]) -> list[str]:
    """The kept messages as Markdown: each one's headers and text as an indented block, where nothing is
    read as Markdown or HTML."""
    lines = []
    for m in messages:
        lines += ["", f"**{m.place.capitalize()}** (batch sequence {m.seq}) on {md(m.subject)}: {md(m.about)}"
                  + (f"; {md(m.problem)}" if m.problem else ""), ""]
        block = [f"{k}: {v}" for k, v in m.headers] + ([""] if m.headers else []) + (m.text or "(empty)").splitlines()
        lines += ["    " + printable(line) for line in block]
    return lines


def incident_report(incident: Incident, replay_link: str | None = None, clock: Clock = Clock(),
                    advice: str | None = None, conformance: str | None = None,
                    messages: list[ShownMessage] | None = None) -> str:
    """The incident as a Markdown file: times in the clock's zone, the batch's own rows marked, the rest
    of the window counted rather than listed; `replay_link` should be absolute (the console's URL); `messages`: the kept ones as
    the reader may see them."""
    loss = incident.loss
    lines = [
        f"# Incident: batch {md(loss.batch_id)}",
        "",
        f"- **What**: {md(describe(loss))}",
        f"- **Stream**: {md(loss.stream or UNKNOWN_STREAM)}",
        f"- **When**: {clock.when(loss.time, fraction=True)} ({clock.label})",
    ]
    if loss.account:
        lines.append(f"- **Account**: {md(loss.account)}")
    if incident.publisher:
        lines.append(f"- **Publisher**: {md(incident.publisher.line())}")
    if conformance:
        lines.append(f"- **Its client and ADR-50**: {md(conformance)}")
    lines.append(f"- **Event id**: {md(loss.event_id)}")
    if replay_link:
        lines.append(f"- **Stream messages in the window**: <{replay_link}>")
    if advice:
        lines += ["", "## What to do", "", md(advice)]
    if incident.manifest is not None:
        lines += ["", f"## What is missing (manifest {incident.manifest.id})", ""]
        lines += [f"- {md(line)}" for line in manifest_lines(incident.manifest)]
    lines += ["", f"## Timeline ({incident.around.total_seconds() / 60:g} minutes either side)", "",
              "| time | stream | event |", "|---|---|---|"]
    lines += [f"| {clock.when(t, fraction=True)} | {md(s)} | {'**' + md(what) + '**' if own else md(what)} |"
              for t, s, what, own in timeline_rows(incident)]
    if incident.folded:
        lines += ["", "Not listed: " + "; ".join(md(line) for line in folded_lines(incident)) + "."]
    if not incident.seen_by_tap:
        lines += ["", "The fast-ingest tap saw nothing of this batch (atomic batches have no `$FI` traffic)."
                  if loss.kind in ATOMIC_KINDS else "The tap saw nothing else of this batch."]
    lines += ["", "## The batch's first and last messages (as the publish side saw them, masked by the rules)"]
    lines += message_lines(messages) if messages else ["", md(no_messages_why(incident))]
    return "\n".join(lines) + "\n"
