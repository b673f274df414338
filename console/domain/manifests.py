"""Loss manifests: what exactly one lost batch is missing, as far as the wire shows it, how sure that is
and what it rests on; and the repair of it (console.manifests keeps them, console.broker.repair is the
publisher's side). The protocol is the README's "Loss manifests: a protocol for publishers".

- a fast batch's gap: the batch sequences the server named (ADR-50's BatchFlowGap: `last_seq` is the
  first lost, `seq` the one that showed it), exact;
- a message the server refused inside a fast batch (ok mode goes on): that sequence, exact;
- a fast batch ended early (fail mode), unknown to its leader (10208) or dropped idle: from its first
  lost sequence on, the end open (the server stored nothing after it, and only the publisher knows how
  far it sent): bounded, or inferred for a drop nobody answered;
- an atomic batch abandoned or lost: the whole batch (nothing of it is stored); its size from its last
  message as the publish side saw it, when tapped, else open.

Every record read here is hostile: a manifest or a repair report on the wire (any client of the account
can publish on their subjects) is parsed totally, one typed error for anything else."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterable

from console.domain.events import BatchEvent, EventKind, MalformedEvent
from console.domain.kept_messages import kept_messages
from console.domain.wire import (
    INT64_MAX, MalformedInput, bounded_int, bounded_text, bounded_time, load_object, stream_name_problem,
)

VERSION = 1
SUBJECT = "batch_console.manifest"  # .<stream>: the console's manifests, each state as it changes
REPAIR_SUBJECT = "batch_console.repair"  # .<stream>: a publisher's report of what it resent
REPAIR_OF, REPAIR_SEQ = "Batch-Console-Repair-Of", "Batch-Console-Repair-Seq"  # on each resent message
STATES = ("open", "resent", "repaired", "partly", "not_repairable")
KINDS = ("atomic_abandoned", "atomic_lost", "fast_ended", "fast_lost", "fast_dropped", "fast_gap", "fast_error")
CERTAINTIES = ("exact", "bounded", "inferred")
MAX_BYTES = 64 * 1024
MAX_SPANS = 256  # spans of one manifest (more gaps are folded into the last one, its end open)
MAX_BATCH_SEQ = 2 ** 53  # a batch sequence JSON holds exactly
_KIND_OF = {EventKind.ATOMIC_ABANDONED: "atomic_abandoned", EventKind.ATOMIC_LOST: "atomic_lost",
            EventKind.FAST_ENDED_EARLY: "fast_ended", EventKind.FAST_LOST: "fast_lost",
            EventKind.FAST_DROPPED: "fast_dropped", EventKind.FAST_GAP: "fast_gap", EventKind.FAST_ERROR: "fast_error"}
EVIDENCE = tuple(_KIND_OF)  # the events a manifest rests on
# what a manifest is read back from: its evidence, what names a batch's stream or size, its records
READ_KINDS = (*EVIDENCE, EventKind.FAST_ATTRIBUTED, EventKind.BATCH_MESSAGES, EventKind.MANIFEST)


EXPORT_COLUMNS = ("time", "stream", "batch", "publisher", "kind", "missing", "certainty", "state", "why", "resent",
                  "found", "through", "rests_on", "domain", "id", "version")


class MalformedManifest(MalformedInput):
    what = "loss manifest"


@dataclass(frozen=True, order=True)
class Span:
    """Batch sequences first..last; last None: and every one after (the end only its publisher knows)."""

    first: int
    last: int | None

    def as_json(self) -> list[int | None]:
        return [self.first, self.last]

    def text(self) -> str:
        return f"{self.first}.." if self.last is None else str(self.first) if self.last == self.first else \
            f"{self.first}-{self.last}"

    def seqs(self, through: int) -> range:
        """Its sequences, an open end closed at `through`."""
        return range(self.first, (self.last if self.last is not None else through) + 1)


def merged(spans: Iterable[Span]) -> tuple[Span, ...]:
    """Sorted, overlapping and touching spans joined; an open span takes in every later one."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.first, s.last is None, s.last or 0)):
        if out and (out[-1].last is None or s.first <= out[-1].last + 1):
            last = out[-1]
            out[-1] = Span(last.first, None if last.last is None or s.last is None else max(last.last, s.last))
        else:
            out.append(s)
    if len(out) > MAX_SPANS:
        out = out[:MAX_SPANS - 1] + [Span(out[MAX_SPANS - 1].first, None)]
    return tuple(out)


def manifest_id(stream: str, batch: str) -> str:
    """One manifest a batch: 24 hex digits of its stream and id."""
    return hashlib.sha256(f"{stream}\x00{batch}".encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Manifest:
    id: str
    stream: str
    batch: str
    kind: str  # KINDS: the gravest loss of the batch
    missing: tuple[Span, ...]  # batch sequences
    certainty: str  # CERTAINTIES
    rests_on: str  # the evidence, in words
    time: datetime  # of its first loss
    publisher: str | None = None  # its publisher's line (console.domain.publisher), when known
    state: str = "open"
    why: str = ""  # the state's reason, in words
    version: int = 1  # one more at each change (so a reader keeps the newest)
    resent: tuple[Span, ...] = ()  # what its publisher says it sent again
    found: tuple[Span, ...] = ()  # what the console read back in the stream, once each
    domain: str | None = None
    through: int | None = None  # the last batch sequence its publisher says it sent (closes an open end)

    def as_json(self) -> dict[str, Any]:
        return {"v": VERSION, "id": self.id, "version": self.version, "stream": self.stream, "batch": self.batch,
                "kind": self.kind, "missing": [s.as_json() for s in self.missing], "certainty": self.certainty,
                "rests_on": self.rests_on, "time": self.time.isoformat().replace("+00:00", "Z"),
                "publisher": self.publisher, "state": self.state, "why": self.why,
                "resent": [s.as_json() for s in self.resent], "found": [s.as_json() for s in self.found],
                "domain": self.domain, "through": self.through}

    def to_json(self) -> bytes:
        return json.dumps(self.as_json(), separators=(",", ":")).encode()

    def missing_text(self) -> str:
        return ", ".join(s.text() for s in self.missing) or "-"

    def as_row(self) -> dict[str, Any]:
        """Flat, for an export (EXPORT_COLUMNS): spans as text (`7-9, 12..`)."""
        return {**{k: v for k, v in self.as_json().items() if k in EXPORT_COLUMNS},
                "missing": self.missing_text(), "resent": ", ".join(s.text() for s in self.resent),
                "found": ", ".join(s.text() for s in self.found)}

    def same_loss(self, other: Manifest) -> bool:
        """What it says is missing, and why, unchanged (its state aside)."""
        return (self.kind, self.missing, self.certainty, self.rests_on) == \
            (other.kind, other.missing, other.certainty, other.rests_on)


@dataclass
class _Evidence:
    spans: list[Span] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    certainty: str = "exact"

    def add(self, span: Span, said: str, certainty: str = "exact") -> None:
        self.spans.append(span)
        self.said.append(said)
        if CERTAINTIES.index(certainty) > CERTAINTIES.index(self.certainty):
            self.certainty = certainty


def manifest_of(events: list[BatchEvent]) -> Manifest | None:
    """The manifest of one batch from its events (None: none of them loses a message, or no stream is named)."""
    losses = [e for e in events if e.kind in EVIDENCE and not (e.kind is EventKind.FAST_ERROR and e.seq is None)]
    if not losses:
        return None
    stream = next((e.stream for e in events if e.stream), None)
    batch = losses[0].batch_id
    if stream is None or not batch:
        return None
    gravest = min(losses, key=lambda e: (EVIDENCE.index(e.kind), e.time))
    evidence = _Evidence()
    if gravest.kind in (EventKind.ATOMIC_ABANDONED, EventKind.ATOMIC_LOST):
        _atomic(gravest, events, evidence)
    else:
        for e in sorted(losses, key=lambda e: e.time):
            _fast(e, evidence)
    if not evidence.spans:
        return None
    publisher = next((e.publisher for e in events if e.publisher), None)
    return Manifest(manifest_id(stream, batch), stream, batch, _KIND_OF[gravest.kind], merged(evidence.spans),
                    evidence.certainty, "; ".join(dict.fromkeys(evidence.said))[:2000], min(e.time for e in losses),
                    publisher.line() if publisher else None, domain=gravest.domain)


def _atomic(loss: BatchEvent, events: list[BatchEvent], evidence: _Evidence) -> None:
    why = f"abandoned ({loss.reason})" if loss.kind is EventKind.ATOMIC_ABANDONED else "lost without an advisory"
    size = None
    for kept in (e for e in events if e.kind is EventKind.BATCH_MESSAGES):
        try:
            size = max([size or 0, *(m.seq for m in kept_messages(kept))])
        except MalformedEvent:
            continue
    if loss.kind is EventKind.ATOMIC_LOST and (loss.count or loss.seq):
        size = max(size or 0, loss.count or 0, loss.seq or 0)  # the commit's sequence, when the tap saw it
    if size:
        evidence.add(Span(1, size), f"the atomic batch {why}: the server stores none of it; its last message, "
                                    f"as the publish side saw it, was {size}")
    else:
        evidence.add(Span(1, None), f"the atomic batch {why}: the server stores none of it; its size is not "
                                    "known (the publish side was not tapped)", "bounded")


def _fast(e: BatchEvent, evidence: _Evidence) -> None:
    if e.kind is EventKind.FAST_GAP and e.first_lost_seq and e.seq and e.first_lost_seq < e.seq:
        evidence.add(Span(e.first_lost_seq, e.seq - 1), f"the server's gap ack (last_seq {e.first_lost_seq}, "
                                                        f"seq {e.seq})")
    elif e.kind is EventKind.FAST_ERROR and e.seq:
        refused = e.lost or 1
        evidence.add(Span(e.seq, e.seq + refused - 1), f"the server refused batch seq {e.seq}"
                     + (f" and {refused - 1} after it" if refused > 1 else "")
                     + (f" ([{e.err_code}] {e.description})" if e.err_code else f" ({e.description})" if e.description else ""))
    elif e.kind is EventKind.FAST_ENDED_EARLY:
        stored = e.count or 0
        evidence.add(Span(stored + 1, None), f"the batch ended early (fail mode, {e.reason or 'gap'}): its PubAck "
                                             f"counts {stored} stored; nothing after is", "bounded")
    elif e.kind is EventKind.FAST_LOST:
        acked = e.seq or 0
        evidence.add(Span(acked + 1, None), f"the leader did not know the batch ([{e.err_code}]): acked up to "
                                            f"{acked}; what was persisted after it is not known", "bounded")
    elif e.kind is EventKind.FAST_DROPPED:
        acked = e.seq or 0
        evidence.add(Span(acked + 1, None), f"no reply past the batch timeout (inferred): acked up to {acked}",
                     "inferred")


def with_report(manifest: Manifest, report: RepairReport) -> Manifest:
    """Its publisher's report: what it sent again ("resent"), or why it cannot ("not_repairable")."""
    if manifest.state in ("repaired", "not_repairable"):
        return manifest
    why = report.why or ("resent, not verified" if report.state == "resent" else "the publisher does not hold them")
    return replace(manifest, state=report.state, why=why[:500], resent=merged((*manifest.resent, *report.resent)),
                   through=max(manifest.through or 0, report.through) or None, version=manifest.version + 1)


def reopened(known: Manifest, derived: Manifest) -> Manifest:
    """More evidence of a batch's loss: the new missing spans, its repair so far kept; open again while
    something named missing was not sent again."""
    fresh = replace(derived, state=known.state, why=known.why, resent=known.resent, found=known.found,
                    through=known.through, version=known.version + 1)
    if known.state in ("repaired", "partly", "resent") and not set(_wanted(fresh)) <= _seqs(known.resent):
        return replace(fresh, state="open", why="more was found missing after its repair began")
    return fresh


def _seqs(spans: Iterable[Span]) -> set[int]:
    return {s for span in spans if span.last is not None for s in span.seqs(span.last)}


def verdict(manifest: Manifest, counted: dict[int, int]) -> Manifest:
    """What the stream holds of the resent messages (batch seq -> times found): repaired when every missing
    one is there once (an open end closed where the publisher says it stopped), partly when some are, some
    not or twice; unchanged while none is there."""
    wanted = _wanted(manifest)
    if not wanted:
        return manifest
    once = [s for s in wanted if counted.get(s) == 1]
    twice = [s for s in wanted if counted.get(s, 0) > 1]
    if not once and not twice:
        return manifest
    found = merged(Span(s, s) for s in once)
    if len(once) == len(wanted):
        state, why = "repaired", f"every missing message is in the stream once ({len(once)})"
    else:
        absent = len(wanted) - len(once) - len(twice)
        state, why = "partly", (f"{len(once)} of {len(wanted)} in the stream once"
                                + (f", {absent} not there" if absent else "")
                                + (f", {len(twice)} more than once (batch seq {twice[0]})" if twice else ""))
    if (state, found) == (manifest.state, manifest.found):
        return manifest
    return replace(manifest, state=state, why=why, found=found, version=manifest.version + 1)


def _wanted(manifest: Manifest) -> list[int]:
    """The batch sequences a repair must put back: the missing ones, an open end closed where its publisher
    says it stopped sending (none said: not known yet)."""
    out: list[int] = []
    for span in manifest.missing:
        if span.last is None and not manifest.through:
            return []
        if span.last is None and manifest.through is not None and manifest.through < span.first:
            continue
        out += list(span.seqs(manifest.through or 0))
        if len(out) > 100_000:
            break
    return out


# -- the wire -------------------------------------------------------------------------------------

def _spans(raw: object, key: str) -> tuple[Span, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_SPANS:
        raise MalformedManifest(f"{key}: not a list of at most {MAX_SPANS} spans")
    spans = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 2:
            raise MalformedManifest(f"{key}: a span is [first, last or null]")
        first = bounded_int(item[0], key, 1, MAX_BATCH_SEQ, MalformedManifest)
        last = None if item[1] is None else bounded_int(item[1], key, first, MAX_BATCH_SEQ, MalformedManifest)
        spans.append(Span(first, last))
    return merged(spans)


def _choice(obj: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = obj.get(key)
    if value not in choices:
        raise MalformedManifest(f"{key}: one of {', '.join(choices)}")
    return str(value)


def _text(value: object, key: str, limit: int) -> str:
    """A text that may be empty."""
    return "" if value == "" else bounded_text(value, key, limit, MalformedManifest)


def _name(value: object, key: str, limit: int = 255) -> str:
    text = bounded_text(value, key, limit, MalformedManifest)
    if not text or any(c in text for c in " .*>\t\r\n\x00") or not text.isprintable():
        raise MalformedManifest(f"{key}: not a name")
    return text


def parse_manifest(data: bytes) -> Manifest:
    """A manifest from the wire or the event log; MalformedManifest for anything else."""
    obj = load_object(data, MalformedManifest, MAX_BYTES)
    if obj.get("v") != VERSION:
        raise MalformedManifest(f"v: {VERSION} only")
    stream, batch = _name(obj.get("stream"), "stream"), _name(obj.get("batch"), "batch", 64)
    if stream_name_problem(stream):
        raise MalformedManifest("stream: not a stream name")
    given_id = bounded_text(obj.get("id"), "id", 24, MalformedManifest)
    if given_id != manifest_id(stream, batch):
        raise MalformedManifest("id: not this stream's and batch's")
    publisher, domain = obj.get("publisher"), obj.get("domain")
    try:
        time = bounded_time(datetime.fromisoformat(str(obj.get("time"))[:40].replace("Z", "+00:00")), MalformedManifest)
    except (ValueError, MalformedInput):
        raise MalformedManifest("time: not a time") from None
    return Manifest(
        given_id, stream, batch, _choice(obj, "kind", KINDS), _spans(obj.get("missing"), "missing"),
        _choice(obj, "certainty", CERTAINTIES), bounded_text(obj.get("rests_on"), "rests_on", 2000, MalformedManifest),
        time, None if publisher is None else bounded_text(publisher, "publisher", 500, MalformedManifest),
        _choice(obj, "state", STATES), _text(obj.get("why"), "why", 500),
        bounded_int(obj.get("version"), "version", 1, INT64_MAX, MalformedManifest),
        _spans(obj.get("resent", []), "resent"), _spans(obj.get("found", []), "found"),
        None if domain is None else _name(domain, "domain", 64),
        None if obj.get("through") is None else bounded_int(obj.get("through"), "through", 1, MAX_BATCH_SEQ,
                                                                MalformedManifest))


@dataclass(frozen=True)
class RepairReport:
    """A publisher's word on one manifest: what it sent again, or why it cannot."""

    id: str
    stream: str
    batch: str
    state: str  # resent | not_repairable
    resent: tuple[Span, ...]
    why: str
    through: int = 0  # the last batch sequence it ever sent of the batch (0: not said)

    def to_json(self) -> bytes:
        return json.dumps({"v": VERSION, "id": self.id, "stream": self.stream, "batch": self.batch,
                           "state": self.state, "resent": [s.as_json() for s in self.resent], "why": self.why,
                           "through": self.through}, separators=(",", ":")).encode()


def parse_report(data: bytes) -> RepairReport:
    obj = load_object(data, MalformedManifest, 16 * 1024)
    if obj.get("v") != VERSION:
        raise MalformedManifest(f"v: {VERSION} only")
    stream, batch = _name(obj.get("stream"), "stream"), _name(obj.get("batch"), "batch", 64)
    if stream_name_problem(stream) or obj.get("id") != manifest_id(stream, batch):
        raise MalformedManifest("id: not this stream's and batch's")
    state = _choice(obj, "state", ("resent", "not_repairable"))
    resent = _spans(obj.get("resent", []), "resent")
    if state == "resent" and (not resent or any(s.last is None for s in resent)):
        raise MalformedManifest("resent: the spans sent again, each closed")
    through = bounded_int(obj.get("through", 0), "through", 0, MAX_BATCH_SEQ, MalformedManifest)
    if any(s.last is not None and s.last > through for s in resent):
        raise MalformedManifest("through: the last sequence it sent, at least every one it sent again")
    return RepairReport(manifest_id(stream, batch), stream, batch, state, resent,
                        _text(obj.get("why", ""), "why", 500), through)


def manifest_in(event: BatchEvent) -> Manifest:
    """The manifest a MANIFEST event holds; MalformedManifest for one that does not read."""
    return parse_manifest((event.detail or "").encode())


def manifests_of(events: list[BatchEvent]) -> list[Manifest]:
    """The manifests a run of the log holds: each one's newest MANIFEST record, and for a loss no console
    kept a manifest of (its alerts part was not running) the one its events make, its why saying so;
    newest loss first."""
    by_batch: dict[str, list[BatchEvent]] = {}
    recorded: dict[str, Manifest] = {}
    for event in events:
        if event.kind is EventKind.MANIFEST:
            try:
                m = manifest_in(event)
            except MalformedManifest:
                continue
            if m.id not in recorded or m.version > recorded[m.id].version:
                recorded[m.id] = m
        elif event.batch_id and event.kind in READ_KINDS:
            by_batch.setdefault(event.batch_id, []).append(event)
    found = dict(recorded)
    for batch_events in by_batch.values():
        derived = manifest_of(batch_events)
        if derived is not None and derived.id not in found:
            found[derived.id] = replace(derived, why="not kept by a console (no alerts part ran): derived from "
                                                     "the event log now")
    return sorted(found.values(), key=lambda m: m.time, reverse=True)
