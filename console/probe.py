"""Publish test batches to a stream on any server and report what happened.

Used by `batch-console probe` and by the web console's Probe page. Fault injection:
`skip_seq` never sends that batch sequence (the server sees a gap); `abandon` stops before
the commit (the server abandons an atomic batch after its timeout; a fast one is dropped).
With `repair`, the probe takes part in the loss manifests' protocol (console.broker.repair): it keeps
what it sent (the skipped message too: it was lost on the way, not unwritten), sends again what a
manifest of one of its batches names and its own replies said was lost, and waits for the console's
verdict on each.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from console.broker.atomic import AtomicBatch
from console.broker.connection import Connection
from console.broker.fast import FastBatch
from console.broker import names
from console.broker.repair import MSG_ID, Repairer, SentWindow, message_id
from console.broker.streams import StreamSpec, ensure_stream
from console.domain.manifests import Span, manifest_id
from console.domain.fast_ingest import GapMode
from console.domain.replies import FlowError, FlowGap, PubAck
from console.errors import BatchEndedError, BatchError, BatchServerError, ConsoleError

PROGRESS_EVERY = 1024


@dataclass(frozen=True)
class ProbeOptions:
    kind: str  # "atomic" | "fast"
    stream: str = "BATCH_PROBE"
    subject: str = "batch_probe.test"
    count: int = 1000  # messages in all
    size: int = 128
    batch_size: int = 100  # atomic: messages per batch
    eob: bool = False  # atomic: commit with an end-of-batch marker
    flow: int = 500  # fast: the most the server grants
    max_outstanding_acks: int = 2  # fast
    gap_mode: GapMode = GapMode.FAIL  # fast
    skip_seq: int | None = None
    abandon: bool = False
    timeout: float = 5.0
    repair: bool = False  # take part in the manifests' protocol: send again what was lost
    repair_wait: float = 60.0  # seconds to wait for the console's verdict on each lost batch

    def __post_init__(self) -> None:
        if self.kind not in ("atomic", "fast"):
            raise ConsoleError(f"probe kind must be atomic or fast, not {self.kind!r}")
        names.stream(self.stream)
        names.subject(self.subject)
        if self.count < 1 or self.size < 0 or self.batch_size < 1:
            raise ConsoleError("count and batch size must be at least 1, size at least 0")
        last = min(self.count, self.batch_size) if self.kind == "atomic" else self.count
        if self.skip_seq is not None and not 1 < self.skip_seq < last:
            raise ConsoleError(f"--skip-seq must be between 2 and {last - 1}: a gap needs a message before and after it")
        if not 0 < self.repair_wait <= 3600:
            raise ConsoleError("--repair-wait must be 0..3600 seconds")


@dataclass(frozen=True)
class RepairOutcome:
    """What became of one lost batch of the probe: the console's last word on its manifest."""

    batch: str
    manifest: str
    state: str  # a manifest's state, or "no_manifest"
    why: str
    resent: str  # batch sequences sent again ("-": none)
    seconds: float  # from the end of the probe to the console's last word


@dataclass(frozen=True)
class FlowChange:
    ack_seq: int
    from_flow: int
    to_flow: int


@dataclass(frozen=True)
class MessageError:
    """A message the server refused inside the batch (ok mode goes on)."""

    seq: int
    err_code: int
    description: str


@dataclass(frozen=True)
class Failure:
    """What ended the probe early: the exception, and the server's code and text when it gave them."""

    type: str
    message: str
    err_code: int | None = None
    description: str | None = None
    code: int | None = None

    @classmethod
    def of(cls, error: Exception) -> Failure:
        if isinstance(error, BatchServerError):
            return cls(type(error).__name__, str(error), error.err_code, error.description, error.code)
        return cls(type(error).__name__, str(error))


@dataclass
class ProbeReport:
    kind: str
    stream: str
    subject: str
    stream_created: bool = False
    batch_ids: list[str] = field(default_factory=list)
    batches_committed: int = 0
    messages_sent: int = 0
    acks: int = 0
    flow: int | None = None
    flow_changes: list[FlowChange] = field(default_factory=list)
    gaps: list[FlowGap] = field(default_factory=list)
    lost: int = 0  # messages the server reported lost in gaps
    errors: list[MessageError] = field(default_factory=list)
    skipped_seq: int | None = None
    abandoned_batch: str | None = None
    puback: PubAck | None = None
    error: Failure | None = None
    seconds: float = 0.0
    msgs_per_s: float = 0.0
    repairs: list[RepairOutcome] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The `probe --json` object (its field names are what scripts read)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("flow_changes", "gaps", "puback", "error")}
        out["flow_changes"] = [{"ack_seq": c.ack_seq, "from": c.from_flow, "to": c.to_flow} for c in self.flow_changes]
        out["gaps"] = [{"first_lost_seq": g.first_lost_seq, "seq": g.seq, "lost": g.lost} for g in self.gaps]
        ack = self.puback
        out["puback"] = None if ack is None else {"stream": ack.stream, "seq": ack.seq, "batch": ack.batch,
                                                  "count": ack.count, "duplicate": ack.duplicate}
        failure = self.error
        out["error"] = None if failure is None else {k: v for k, v in asdict(failure).items()
                                                     if v is not None or k in ("type", "message")}
        return out

    def text(self) -> str:
        """What `probe` prints without --json."""
        lines = [f"{self.kind} probe on {self.stream} ({self.subject}): {self.messages_sent} messages in "
                 f"{self.seconds:.3f}s ({self.msgs_per_s:,.0f}/s)"]
        if (ack := self.puback) is not None:
            lines.append(f"  last PubAck: stream {ack.stream} seq {ack.seq}"
                         + (f" batch {ack.batch} count {ack.count}" if ack.batch else "")
                         + (" (duplicate)" if ack.duplicate else ""))
        lines += [f"  gap: lost {g.lost} from seq {g.first_lost_seq} (seen at {g.seq})" for g in self.gaps]
        lines += [f"  error at seq {e.seq}: [{e.err_code}] {e.description}" for e in self.errors]
        if self.abandoned_batch:
            lines.append(f"  left open on purpose: {self.abandoned_batch}")
        if self.error is not None:
            lines.append(f"  error: {self.error.message}")
        lines += [f"  repair of {r.batch}: {r.state.replace('_', ' ')} ({r.why}); sent again: {r.resent}; "
                  f"{r.seconds:.1f} s after the probe" for r in self.repairs]
        return "\n".join(lines)


async def ensure_probe_stream(nc: Connection, options: ProbeOptions) -> bool:
    """Create the probe stream, allowing both kinds of batch, when it does not exist; an existing one is left as it is."""
    ensured = await ensure_stream(nc, StreamSpec(options.stream, (options.subject,), allow_atomic=True,
                                                             allow_batched=True))
    return ensured.created


async def run_probe(nc: Connection, options: ProbeOptions, progress: Callable[[int], None] | None = None,
                    repair_key: bytes | None = None) -> ProbeReport:
    """With options.repair, `repair_key` (the event key) verifies the console's manifests: None takes them
    unsigned (its own replies still bound what it sends again)."""
    report = ProbeReport(options.kind, options.stream, options.subject, skipped_seq=options.skip_seq)
    report.stream_created = await ensure_probe_stream(nc, options)
    payload = b"p" * options.size
    window = SentWindow() if options.repair else None
    repairer = Repairer(nc, window, repair_key, (options.stream,)) if window is not None else None
    if repairer is not None:
        await repairer.start()
    started = time.perf_counter()
    try:
        run = _probe_atomic if options.kind == "atomic" else _probe_fast
        try:
            await run(nc, options, report, payload, progress or (lambda n: None), window)
        except BatchError as e:
            report.error = Failure.of(e)
        report.seconds = round(time.perf_counter() - started, 6)
        report.msgs_per_s = round(report.messages_sent / report.seconds, 1) if report.seconds else 0.0
        if repairer is not None and window is not None:
            report.repairs = await _repairs(repairer, window, options)
    finally:
        if repairer is not None:
            await repairer.stop()
    return report


FINAL = ("repaired", "partly", "not_repairable")


async def _repairs(repairer: Repairer, window: SentWindow, options: ProbeOptions) -> list[RepairOutcome]:
    """The console's word on each of the probe's lost batches: waited for until final or options.repair_wait."""
    lost = {batch: manifest_id(options.stream, batch) for batch, kept in window.batches.items() if kept.lost}
    began = time.monotonic()
    heard: dict[str, float] = {}

    def final() -> bool:
        done = True
        for mid in lost.values():
            state = repairer.states.get(mid)
            if state is not None and state.state in FINAL:
                heard.setdefault(mid, time.monotonic() - began)
            else:
                done = False
        return done

    while lost and not final() and time.monotonic() - began < options.repair_wait:
        repairer.changed.clear()
        try:
            await asyncio.wait_for(repairer.changed.wait(), max(0.1, options.repair_wait - (time.monotonic() - began)))
        except asyncio.TimeoutError:
            break
    outcomes = []
    for batch, mid in lost.items():
        m = repairer.states.get(mid)
        if m is None:
            outcomes.append(RepairOutcome(batch, mid, "no_manifest", f"no manifest within {options.repair_wait:g} s "
                                          "(is a console's alerts part watching this server?)", "-", options.repair_wait))
        else:
            outcomes.append(RepairOutcome(batch, mid, m.state, m.why, ", ".join(s.text() for s in m.resent) or "-",
                                          round(heard.get(mid, time.monotonic() - began), 3)))
    return outcomes


def _kept(window: SentWindow | None, batch: str, seq: int, subject: str, payload: bytes,
          stream: str) -> dict[str, str] | None:
    """The headers a message goes with, kept in the window first (a repairing probe's carry a message id)."""
    if window is None:
        return None
    headers = {MSG_ID: message_id(batch, seq)}
    window.keep(batch, seq, subject, payload, headers, stream)
    return headers


async def _probe_atomic(nc: Connection, options: ProbeOptions, report: ProbeReport, payload: bytes,
                        progress: Callable[[int], None], window: SentWindow | None = None) -> None:
    full, rest = divmod(options.count, options.batch_size)
    sizes = [options.batch_size] * full + ([rest] if rest else [])
    for index, size in enumerate(sizes):
        batch = AtomicBatch(nc, timeout=options.timeout)
        report.batch_ids.append(batch.batch_id)
        staged = size if options.eob else size - 1  # messages before the commit
        for seq in range(1, staged + 1):
            headers = _kept(window, batch.batch_id, seq, options.subject, payload, options.stream)
            if index == 0 and seq == options.skip_seq:
                batch.skip_seq()
                continue
            await batch.add(options.subject, payload, headers)
            report.messages_sent += 1
            if report.messages_sent % PROGRESS_EVERY == 0:
                progress(report.messages_sent)
        if options.abandon and index == len(sizes) - 1:
            batch.discard()
            report.abandoned_batch = batch.batch_id
            if window is not None:
                window.lost(batch.batch_id, Span(1, None))  # the server abandons the whole batch
                window.settle(batch.batch_id)
            break
        try:
            if options.eob:
                ack = await batch.commit_eob()
            else:
                headers = _kept(window, batch.batch_id, staged + 1, options.subject, payload, options.stream)
                ack = await batch.commit(options.subject, payload, headers)
                report.messages_sent += 1
        except BatchError:
            if window is not None:
                window.lost(batch.batch_id, Span(1, None))  # nothing of an atomic batch is stored
                window.settle(batch.batch_id)
            raise
        if window is not None:
            window.committed(batch.batch_id)
            window.settle(batch.batch_id)
        report.batches_committed += 1
        report.puback = ack
        progress(report.messages_sent)


async def _probe_fast(nc: Connection, options: ProbeOptions, report: ProbeReport, payload: bytes,
                      progress: Callable[[int], None], window: SentWindow | None = None) -> None:
    def on_problem(problem: FlowGap | FlowError) -> None:
        if isinstance(problem, FlowGap):
            report.gaps.append(problem)
            report.lost += problem.lost
            if window is not None:
                window.lost(batch.batch_id, Span(problem.first_lost_seq, problem.seq - 1))
        else:
            e = problem.error
            report.errors.append(MessageError(problem.seq, e.err_code, e.description))
            if window is not None:
                window.lost(batch.batch_id, Span(problem.seq, problem.seq))

    batch = FastBatch(
        nc,
        flow=options.flow,
        max_outstanding_acks=options.max_outstanding_acks,
        gap_mode=options.gap_mode,
        ack_timeout=options.timeout,
        on_problem=on_problem,
    )
    report.batch_ids.append(batch.batch_id)
    try:
        for seq in range(1, options.count):
            headers = _kept(window, batch.batch_id, seq, options.subject, payload, options.stream)
            if seq == options.skip_seq:
                batch.skip_seq()
                continue
            await batch.add(options.subject, payload, headers)
            report.messages_sent += 1
            if seq % PROGRESS_EVERY == 0:
                progress(report.messages_sent)
        if options.abandon:
            report.abandoned_batch = batch.batch_id
        else:
            headers = _kept(window, batch.batch_id, options.count, options.subject, payload, options.stream)
            report.puback = await batch.commit(options.subject, payload, headers)
            report.messages_sent += 1
        report.batches_committed = 0 if options.abandon else 1
    except BatchEndedError as e:
        report.puback = e.puback
        if window is not None:  # fail mode: nothing after what its PubAck counts was stored
            window.lost(batch.batch_id, Span(((e.puback.count or 0) if e.puback else 0) + 1, None))
        raise
    except BatchError:
        if window is not None:
            window.lost(batch.batch_id, Span(batch.ack_seq + 1, None))
        raise
    finally:
        if window is not None:
            window.settle(batch.batch_id)
        report.acks, report.flow = batch.acks, batch.flow
        report.flow_changes = [FlowChange(s, old, new) for s, old, new in batch.flow_changes]
        await batch.close()
        progress(report.messages_sent)
