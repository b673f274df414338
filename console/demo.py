"""Demo traffic from the console's own publishers, so a newcomer's first screen has every outcome:
committed atomic batches, abandoned ones of each reason, fast batches at different flows from
concurrent publishers, gaps in `ok` and `fail` mode, an idle fast batch dropped. It writes only to
the streams it created (marked in their metadata)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any


from console.broker.admin import StreamAdmin
from console.broker.atomic import AtomicBatch
from console.broker.connection import Connection, NatsError, flush
from console.broker.consumers import read_through
from console.broker.fast import FastBatch
from console.broker.streams import StreamSpec, ensure_stream
from console.domain.fast_ingest import GapMode
from console.errors import BatchEndedError, BatchError, ConsoleError

log = logging.getLogger(__name__)

MARK = {"batch_console_demo": "1"}
ATOMIC_STREAM, FAST_STREAM = "DEMO_ORDERS", "DEMO_INGEST"
ORDERS, INGEST = "demo.orders", "demo.ingest"


@dataclass(frozen=True)
class DemoStream:
    name: str
    subject: str
    atomic: bool


DEMO_STREAMS = (DemoStream(ATOMIC_STREAM, f"{ORDERS}.>", True), DemoStream(FAST_STREAM, f"{INGEST}.>", False))
# What `up --demo` taps on the publish side: its atomic batches get names, and its fast batches their
# stream from their subject (a batch the server drops, idle, is never named by a reply: it showed as an
# "(unknown) dropped" batch and fired an alert on "(unknown)" every round)
DEMO_SUBJECTS = (f"{ORDERS}.>", f"{INGEST}.>")
DEMO_CLIENT = "batch-console demo (deliberate faults)"  # its connection name: where a publisher is shown


async def ensure_demo_streams(nc: Connection) -> int:
    """Create the demo streams, or reuse the ones an earlier demo created; refuse anything else.
    Returns their replicas (3 on a cluster of three servers or more)."""
    replicas = []
    for s in DEMO_STREAMS:
        ensured = await ensure_stream(nc, StreamSpec(s.name, (s.subject,), allow_atomic=s.atomic,
                                                                 allow_batched=not s.atomic, max_age=24 * 3600,
                                                                 metadata=dict(MARK)))
        metadata = ensured.config.metadata or {}
        if metadata.get("batch_console_demo") != "1":
            raise ConsoleError(f"stream {s.name} exists and was not created by the demo: the demo never writes to it")
        replicas.append(ensured.config.num_replicas or 1)
    return min(replicas)


async def _expect_refusal(work: Any) -> None:
    try:
        await work
    except BatchError:
        pass  # the refusal is what makes the server abandon the batch


async def abandon_each_reason(nc: Connection) -> None:
    subject = f"{ORDERS}.lost"
    timeout = AtomicBatch(nc)
    await timeout.add(subject, b'{"order": "never committed"}')
    timeout.discard()  # the server abandons it at its batch timeout
    gap = AtomicBatch(nc)
    await gap.add(subject, b"1")
    gap.skip_seq()
    await _expect_refusal(gap.commit(subject, b"3"))
    large = AtomicBatch(nc, max_msgs=1001)

    async def too_many() -> None:
        for _ in range(1001):
            await large.add(subject, b"x")
    await _expect_refusal(too_many())
    await _expect_refusal(AtomicBatch(nc).add(subject, b"1", headers={"Nats-Required-Api-Level": "99"}))


async def commit_atomic(nc: Connection, batches: int = 3, size: int = 10) -> None:
    for b in range(batches):
        batch = AtomicBatch(nc)
        for i in range(size - 1):
            await batch.add(f"{ORDERS}.new", f'{{"batch": {b}, "line": {i}}}'.encode())
        await batch.commit(f"{ORDERS}.new", b'{"total": true}')


async def fast_batch(nc: Connection, count: int, flow: int, gap_mode: GapMode = GapMode.FAIL,
                     skip_at: int | None = None, pace: float = 0.0) -> None:
    batch = FastBatch(nc, flow=flow, gap_mode=gap_mode)
    try:
        for seq in range(1, count):
            if seq == skip_at:
                batch.skip_seq(2)
            await batch.add(f"{INGEST}.readings", f'{{"seq": {seq}}}'.encode())
            if pace:
                await asyncio.sleep(pace)
        await batch.commit(f"{INGEST}.readings", b'{"last": true}')
    except BatchEndedError:
        pass  # fail mode: the gap ended it, as intended


async def idle_fast_batch(nc: Connection) -> None:
    """Starts a fast batch and goes silent: the server drops it after its batch timeout."""
    batch = FastBatch(nc, flow=5)
    for seq in range(1, 8):
        await batch.add(f"{INGEST}.idle", f'{{"seq": {seq}}}'.encode())
    await batch.close()


async def across_leader_changes(nc: Connection) -> None:
    """On a cluster: an atomic batch open while its stream elects a new leader (the server drops it
    without an advisory; its commit gets 10176), and a fast batch across one (the wire decides)."""
    admin = StreamAdmin(nc)
    atomic = AtomicBatch(nc)
    await atomic.add(f"{ORDERS}.across", b'{"order": "open across a leader change"}')
    await flush(nc)
    await admin.step_down(ATOMIC_STREAM)
    await _expect_refusal(atomic.commit(f"{ORDERS}.across", b'{"total": true}'))
    fast = FastBatch(nc, flow=10, gap_mode=GapMode.FAIL)
    try:
        for seq in range(1, 200):
            if seq == 100:
                await admin.step_down(FAST_STREAM)
            await fast.add(f"{INGEST}.across", f'{{"seq": {seq}}}'.encode())
        await fast.commit(f"{INGEST}.across", b'{"last": true}')
    except BatchError:
        pass  # no leader for a moment (503), or the batch unknown to the new one (10208)


DEMO_READER = "demo-reader"  # a durable that reads the committed orders each round: the Consumers page has one


async def read_orders(nc: Connection) -> int:
    """The demo's reader: every committed order read and acked (between rounds it is caught up)."""
    return await read_through(nc, ATOMIC_STREAM, DEMO_READER, "the demo's reader of its committed orders")


async def demo_round(nc: Connection, leader_changes: bool = False) -> None:
    await commit_atomic(nc)
    await read_orders(nc)
    await abandon_each_reason(nc)
    await asyncio.gather(  # concurrent publishers: the server shares the flow between them
        fast_batch(nc, 3000, flow=200, pace=0.0005), fast_batch(nc, 3000, flow=50, pace=0.0005),
        fast_batch(nc, 500, flow=20, gap_mode=GapMode.OK, skip_at=120),
        fast_batch(nc, 500, flow=20, gap_mode=GapMode.FAIL, skip_at=300))
    await idle_fast_batch(nc)
    if leader_changes:
        await across_leader_changes(nc)


async def run_demo(nc: Connection, every: float = 30.0, rounds: int | None = None) -> int:
    """Rounds of demo traffic until `rounds` are done (None: until cancelled); returns the rounds run."""
    leader_changes = await ensure_demo_streams(nc) >= 3
    done, failures = 0, Counter[str]()
    while rounds is None or done < rounds:
        try:
            await demo_round(nc, leader_changes)
        except (BatchError, NatsError, asyncio.TimeoutError) as e:
            failures[type(e).__name__] += 1
            log.warning("demo round %d: %s", done + 1, str(e) or repr(e))
        done += 1
        log.info("demo round %d done%s", done, f" (failures so far: {dict(failures)})" if failures else "")
        if rounds is None or done < rounds:
            await asyncio.sleep(every)
    return done
