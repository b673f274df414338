"""Publish test batches to a stream on any server and report what happened.

Used by `batch-console probe` and by the web console's Probe page. Fault injection:
`skip_seq` never sends that batch sequence (the server sees a gap); `abandon` stops before
the commit (the server abandons an atomic batch after its timeout; a fast one is dropped).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import nats.js.errors
from nats.aio.client import Client
from nats.js.api import StorageType, StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.fast import FastBatch
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
    flow: int = 100  # fast
    max_outstanding_acks: int = 2  # fast
    gap_mode: GapMode = GapMode.FAIL  # fast
    skip_seq: int | None = None
    abandon: bool = False
    timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.kind not in ("atomic", "fast"):
            raise ConsoleError(f"probe kind must be atomic or fast, not {self.kind!r}")
        if self.count < 1 or self.size < 0 or self.batch_size < 1:
            raise ConsoleError("count and batch size must be at least 1, size at least 0")
        last = min(self.count, self.batch_size) if self.kind == "atomic" else self.count
        if self.skip_seq is not None and not 1 < self.skip_seq < last:
            raise ConsoleError(f"--skip-seq must be between 2 and {last - 1}: a gap needs a message before and after it")


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
    flow_changes: list[dict] = field(default_factory=list)
    gaps: list[dict] = field(default_factory=list)
    lost: int = 0  # messages the server reported lost in gaps
    errors: list[dict] = field(default_factory=list)
    skipped_seq: int | None = None
    abandoned_batch: str | None = None
    puback: dict | None = None
    error: dict | None = None
    seconds: float = 0.0
    msgs_per_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _puback_json(ack: PubAck) -> dict:
    return {"stream": ack.stream, "seq": ack.seq, "batch": ack.batch, "count": ack.count, "duplicate": ack.duplicate}


def _error_json(error: Exception) -> dict:
    out = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, BatchServerError):
        out.update(err_code=error.err_code, description=error.description, code=error.code)
    return out


async def ensure_stream(nc: Client, options: ProbeOptions) -> bool:
    """Create the probe stream, allowing both kinds of batch, when it does not exist; an existing one is left as it is."""
    js = nc.jetstream()
    try:
        await js.stream_info(options.stream)
        return False
    except nats.js.errors.NotFoundError:
        pass
    await js.add_stream(
        StreamConfig(
            name=options.stream, subjects=[options.subject], storage=StorageType.FILE, allow_atomic=True, allow_batched=True
        )
    )
    return True


async def run_probe(nc: Client, options: ProbeOptions, progress: Callable[[int], None] | None = None) -> ProbeReport:
    report = ProbeReport(options.kind, options.stream, options.subject, skipped_seq=options.skip_seq)
    report.stream_created = await ensure_stream(nc, options)
    payload = b"p" * options.size
    started = time.perf_counter()
    try:
        run = _probe_atomic if options.kind == "atomic" else _probe_fast
        await run(nc, options, report, payload, progress or (lambda n: None))
    except BatchError as e:
        report.error = _error_json(e)
    report.seconds = round(time.perf_counter() - started, 6)
    report.msgs_per_s = round(report.messages_sent / report.seconds, 1) if report.seconds else 0.0
    return report


async def _probe_atomic(nc, options: ProbeOptions, report: ProbeReport, payload: bytes, progress) -> None:
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
        report.puback = _puback_json(ack)
        progress(report.messages_sent)


async def _probe_fast(nc, options: ProbeOptions, report: ProbeReport, payload: bytes, progress) -> None:
    def on_problem(problem: FlowGap | FlowError) -> None:
        if isinstance(problem, FlowGap):
            report.gaps.append({"first_lost_seq": problem.first_lost_seq, "seq": problem.seq, "lost": problem.lost})
            report.lost += problem.lost
        else:
            e = problem.error
            report.errors.append({"seq": problem.seq, "err_code": e.err_code, "description": e.description})

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
            report.puback = _puback_json(await batch.commit(options.subject, payload))
            report.messages_sent += 1
        report.batches_committed = 0 if options.abandon else 1
    except BatchEndedError as e:
        report.puback = _puback_json(e.puback)
        raise
    finally:
        report.acks, report.flow = batch.acks, batch.flow
        report.flow_changes = [{"ack_seq": s, "from": old, "to": new} for s, old, new in batch.flow_changes]
        await batch.close()
        progress(report.messages_sent)
