"""Publish test batches to a stream on any server and report what happened.

Used by `batch-console probe` and by the web console's Probe page. Fault injection:
`skip_seq` never sends that batch sequence (the server sees a gap); `abandon` stops before
the commit (the server abandons an atomic batch after its timeout; a fast one is dropped).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from console.broker.atomic import AtomicBatch
from console.broker.connection import Connection
from console.broker.fast import FastBatch
from console.broker import names
from console.broker.streams import StreamSpec, ensure_stream
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
        return "\n".join(lines)


async def ensure_probe_stream(nc: Connection, options: ProbeOptions) -> bool:
    """Create the probe stream, allowing both kinds of batch, when it does not exist; an existing one is left as it is."""
    ensured = await ensure_stream(nc, StreamSpec(options.stream, (options.subject,), allow_atomic=True,
                                                             allow_batched=True))
    return ensured.created


async def run_probe(nc: Connection, options: ProbeOptions, progress: Callable[[int], None] | None = None) -> ProbeReport:
    report = ProbeReport(options.kind, options.stream, options.subject, skipped_seq=options.skip_seq)
    report.stream_created = await ensure_probe_stream(nc, options)
    payload = b"p" * options.size
    started = time.perf_counter()
    try:
        run = _probe_atomic if options.kind == "atomic" else _probe_fast
        await run(nc, options, report, payload, progress or (lambda n: None))
    except BatchError as e:
        report.error = Failure.of(e)
    report.seconds = round(time.perf_counter() - started, 6)
    report.msgs_per_s = round(report.messages_sent / report.seconds, 1) if report.seconds else 0.0
    return report


async def _probe_atomic(nc: Connection, options: ProbeOptions, report: ProbeReport, payload: bytes,
                        progress: Callable[[int], None]) -> None:
    full, rest = divmod(options.count, options.batch_size)
    sizes = [options.batch_size] * full + ([rest] if rest else [])
    for index, size in enumerate(sizes):
        batch = AtomicBatch(nc, timeout=options.timeout)
        report.batch_ids.append(batch.batch_id)
        staged = size if options.eob else size - 1  # messages before the commit
        for seq in range(1, staged + 1):
            if index == 0 and seq == options.skip_seq:
                batch.skip_seq()
                continue
            await batch.add(options.subject, payload)
            report.messages_sent += 1
            if report.messages_sent % PROGRESS_EVERY == 0:
                progress(report.messages_sent)
        if options.abandon and index == len(sizes) - 1:
            batch.discard()
            report.abandoned_batch = batch.batch_id
            break
        if options.eob:
            ack = await batch.commit_eob()
        else:
            ack = await batch.commit(options.subject, payload)
            report.messages_sent += 1
        report.batches_committed += 1
        report.puback = ack
        progress(report.messages_sent)


async def _probe_fast(nc: Connection, options: ProbeOptions, report: ProbeReport, payload: bytes,
                      progress: Callable[[int], None]) -> None:
    def on_problem(problem: FlowGap | FlowError) -> None:
        if isinstance(problem, FlowGap):
            report.gaps.append(problem)
            report.lost += problem.lost
        else:
            e = problem.error
            report.errors.append(MessageError(problem.seq, e.err_code, e.description))

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
            if seq == options.skip_seq:
                batch.skip_seq()
                continue
            await batch.add(options.subject, payload)
            report.messages_sent += 1
            if seq % PROGRESS_EVERY == 0:
                progress(report.messages_sent)
        if options.abandon:
            report.abandoned_batch = batch.batch_id
        else:
            report.puback = await batch.commit(options.subject, payload)
            report.messages_sent += 1
        report.batches_committed = 0 if options.abandon else 1
    except BatchEndedError as e:
        report.puback = e.puback
        raise
    finally:
        report.acks, report.flow = batch.acks, batch.flow
        report.flow_changes = [FlowChange(s, old, new) for s, old, new in batch.flow_changes]
        await batch.close()
        progress(report.messages_sent)
