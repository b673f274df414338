"""The collector's cost and speed, side by side in one run against one embedded nats-server.

    .venv/bin/python bench/collector.py [--rounds 3] [--messages 200000] [--abandonments 1000]

1. A fast-ingest publisher at flow 10 (the most acks per message), with and without the
   collector (`batch-console collect`, its own process) tapping it: the publisher's msgs/s,
   the ratio, and whether the collector's ack count equals the publisher's.
2. A burst of abandoned atomic batches: time until a bare nats-py subscriber has received every
   advisory, and until every event is in the event log.
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
from collections import Counter
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.broker.atomic import AtomicBatch  # noqa: E402
from console.broker.eventlog import EventLogSettings  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.domain.events import EventKind, event_from_json  # noqa: E402
from console.errors import BatchError  # noqa: E402

PAYLOAD = b"x" * 128
PACE = 0.010  # the collector's default --pace-ms, for the bare reference tap
CLI = str(Path(sys.executable).parent / "batch-console")


async def publish_fast(nc, n: int) -> tuple[float, FastBatch]:
    batch = FastBatch(nc, flow=10, max_outstanding_acks=2)
    start = time.perf_counter()
    for _ in range(n - 1):
        await batch.add("fast.bench", PAYLOAD)
    ack = await batch.commit("fast.bench", PAYLOAD)
    assert ack.count == n
    return n / (time.perf_counter() - start), batch


class EventWatch:
    """Counts the collector's events as the log stores them: a core subscription on the log's
    subjects, so measuring adds no JetStream API calls (each of those raises an advisory)."""

    def __init__(self, nc, prefix: str):
        self.nc, self.prefix = nc, prefix
        self.acks: Counter[str] = Counter()
        self.committed: dict[str, asyncio.Event] = {}
        self.abandoned = 0
        self.all_abandoned = asyncio.Event()
        self.expect_abandoned = 0

    async def start(self):
        self.sub = await self.nc.subscribe(f"{self.prefix}.>", cb=self._on_event)

    async def _on_event(self, msg):
        event = event_from_json(msg.data)
        if event.kind is EventKind.FAST_PROGRESS:
            self.acks[event.batch_id] += event.acks
        elif event.kind is EventKind.FAST_COMMITTED:
            self.committed.setdefault(event.batch_id, asyncio.Event()).set()
        elif event.kind is EventKind.ATOMIC_ABANDONED and event.stream == "BURST":
            self.abandoned += 1
            if self.abandoned >= self.expect_abandoned:
                self.all_abandoned.set()

    async def acks_of(self, batch_id: str, timeout: float = 60) -> int:
        done = self.committed.setdefault(batch_id, asyncio.Event())
        await asyncio.wait_for(done.wait(), timeout)
        return self.acks[batch_id]


async def bare_tap(url: str, pace: float) -> None:
    """The floor for any tap written on nats-py: subscribe to the same $FI patterns, only count,
    paced and niced like the collector. Runs as its own process (--bare-tap)."""
    os.nice(10)
    nc = await nats.connect(url)
    received = 0

    async def count(msg):
        nonlocal received
        received += 1

    for depth in (5, 6):
        await nc.subscribe(".".join(["_INBOX"] + ["*"] * depth + ["$FI"]), cb=count)
    await nc.flush()
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        time.sleep(pace)
        await asyncio.sleep(0)
    print(received, flush=True)


async def tapped_rates(nc, cmd: list[str], rounds: int, messages: int) -> list[float]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    rates = [(await publish_fast(nc, messages))[0] for _ in range(rounds)]
    proc.terminate()
    proc.wait(timeout=20)
    return rates


async def wait_collector_ready(js, proc) -> None:
    while True:
        try:
            await js.consumer_info("BATCH_CONSOLE_ADVISORIES", "batch-console-collector")
            return
        except nats.js.errors.NotFoundError:
            if proc.poll() is not None:
                raise RuntimeError("collector exited")
            await asyncio.sleep(0.05)


async def abandonment_burst(nc, watch: EventWatch, count: int, limit: float = 120) -> tuple[float, float, int, int]:
    """Seconds until a bare subscriber has every advisory, and until the log has stored every event."""
    received = asyncio.Event()
    seen = 0

    async def on_advisory(msg):
        nonlocal seen
        seen += 1
        if seen >= count:
            received.set()

    sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.BURST", cb=on_advisory)
    watch.expect_abandoned = watch.abandoned + count
    start = time.perf_counter()
    refused = Counter()
    for _ in range(count):
        batch = AtomicBatch(nc)
        try:
            await batch.add("burst.x", b"1")
            batch.skip_seq()
            await batch.commit("burst.x", b"3")
        except BatchError as e:
            refused[type(e).__name__] += 1
    if set(refused) - {"BatchIncompleteError"}:
        print(f"  burst: the server refused {dict(refused)}", file=sys.stderr)

    async def timed(event: asyncio.Event) -> float:
        try:
            await asyncio.wait_for(event.wait(), limit)
            return time.perf_counter() - start
        except asyncio.TimeoutError:
            return float("nan")

    bare, logged = await asyncio.gather(timed(received), timed(watch.all_abandoned))
    await sub.unsubscribe()
    return bare, logged, seen, watch.abandoned


async def run(server: EmbeddedServer, tmp: Path, rounds: int, messages: int, abandonments: int) -> None:
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="FASTBENCH", subjects=["fast.bench"], storage=StorageType.FILE, allow_batched=True))
    await js.add_stream(StreamConfig(name="BURST", subjects=["burst.>"], storage=StorageType.FILE, allow_atomic=True))

    alone = []
    for r in range(rounds):
        rate, _ = await publish_fast(nc, messages)
        alone.append(rate)
        print(f"  round {r + 1}: publisher alone {rate:,.0f} msgs/s", file=sys.stderr)
    floor = await tapped_rates(nc, [sys.executable, __file__, "--bare-tap", server.url], rounds, messages)
    print(f"  publisher tapped by a bare nats-py subscriber: {[round(r) for r in floor]}", file=sys.stderr)

    with open(tmp / "collector.log", "w") as err:
        proc = subprocess.Popen([CLI, "collect", "--server", server.url], stderr=err)
    try:
        await wait_collector_ready(js, proc)
        watch = EventWatch(nc, EventLogSettings().subject_prefix)
        await watch.start()
        tapped, equal = [], []
        for r in range(rounds):
            rate, batch = await publish_fast(nc, messages)
            tapped.append(rate)
            seen = await watch.acks_of(batch.batch_id)
            equal.append((seen, batch.acks))
            print(f"  round {r + 1}: publisher tapped {rate:,.0f} msgs/s, acks {seen}/{batch.acks}", file=sys.stderr)
        bare, logged, seen, stored = await abandonment_burst(nc, watch, abandonments)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        await nc.close()

    a, t = statistics.median(alone), statistics.median(tapped)
    print(f"\n{'fast ingest, flow 10, 2 outstanding acks':<52}{'msgs/s':>12}")
    print(f"{'  publisher alone':<52}{a:>12,.0f}")
    print(f"{'  publisher tapped by the collector':<52}{t:>12,.0f}")
    print(f"{'  tapped / alone (target >= 0.95)':<52}{t / a:>12.3f}")
    f = statistics.median(floor)
    print(f"{'  for reference: tapped by a bare nats-py subscriber':<52}{f:>12,.0f}")
    print(f"{'  bare subscriber / alone (the floor for a nats-py tap)':<52}{f / a:>12.3f}")
    print(f"{'  collector acks == publisher acks, every round':<52}{str(all(s == p for s, p in equal)):>12}")
    print(f"\n{f'burst of {abandonments} abandonments':<52}{'seconds':>12}")
    print(f"{'  bare nats-py subscriber has all advisories':<52}{bare:>12.3f}")
    print(f"{'  all events in the event log':<52}{logged:>12.3f}")
    print(f"{'  event log / bare subscriber (target <= 2)':<52}{logged / bare:>12.3f}")
    print(f"{'  advisories received / events stored':<52}{f'{seen} / {stored}':>12}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--abandonments", type=int, default=1000)
    parser.add_argument("--bare-tap", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_tap:
        asyncio.run(bare_tap(args.bare_tap, PACE))
        return
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        asyncio.run(run(server, Path(tmp), args.rounds, args.messages, args.abandonments))


if __name__ == "__main__":
    main()
