"""Publish throughput, side by side in one run against one embedded nats-server.

    .venv/bin/python bench/publish.py [--rounds 3] [--scale 1.0]

128-byte messages to a file-storage R1 stream (a fresh stream per measurement). Prints msgs/s
(median of the rounds) and the ratios the foundation issue sets as targets. A benchmark, not a
test: the machines are shared and noisy, so read the ratios, not the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.broker.atomic import AtomicBatch  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402

PAYLOAD = b"x" * 128
STREAM = "BENCH"
SUBJECT = "bench.publish"


async def fresh_stream(js) -> None:
    try:
        await js.delete_stream(STREAM)
    except nats.js.errors.NotFoundError:
        pass
    await js.add_stream(
        StreamConfig(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE, num_replicas=1, allow_atomic=True, allow_batched=True)
    )


async def wait_stored(js, n: int) -> None:
    while (await js.stream_info(STREAM)).state.messages < n:
        await asyncio.sleep(0.005)


async def core_publish(nc, js, n: int) -> float:
    """No acks at all; timed until the stream has stored every message."""
    start = time.perf_counter()
    for _ in range(n):
        await nc.publish(SUBJECT, PAYLOAD)
    await nc.flush()
    await wait_stored(js, n)
    return n / (time.perf_counter() - start)


async def js_publish(nc, js, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await js.publish(SUBJECT, PAYLOAD)
    return n / (time.perf_counter() - start)


async def js_publish_async(nc, js, n: int) -> float:
    window = nc.jetstream(publish_async_max_pending=4000)
    start = time.perf_counter()
    for _ in range(n):
        await window.publish_async(SUBJECT, PAYLOAD)
    await window.publish_async_completed()
    return n / (time.perf_counter() - start)


async def atomic_batches(nc, js, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n // 1000):
        batch = AtomicBatch(nc)
        for _ in range(999):
            await batch.add(SUBJECT, PAYLOAD)
        ack = await batch.commit(SUBJECT, PAYLOAD)
        assert ack.count == 1000
    return n / (time.perf_counter() - start)


async def fast_ingest(nc, js, n: int) -> float:
    start = time.perf_counter()
    batch = FastBatch(nc, flow=100, max_outstanding_acks=2)
    for _ in range(n - 1):
        await batch.add(SUBJECT, PAYLOAD)
    ack = await batch.commit(SUBJECT, PAYLOAD)
    assert ack.count == n, ack
    return n / (time.perf_counter() - start)


CASES = [
    ("core publish, no acks (until stored)", core_publish, 200_000),
    ("nats-py js.publish, one at a time", js_publish, 10_000),
    ("nats-py publish_async, 4000 pending", js_publish_async, 100_000),
    ("atomic batches of 1000", atomic_batches, 50_000),
    ("fast ingest, flow 100, 2 outstanding acks", fast_ingest, 200_000),
]


async def run(url: str, rounds: int, scale: float) -> dict[str, float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    rates: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    for r in range(rounds):
        for name, case, n in CASES:
            await fresh_stream(js)
            count = max(1000, int(n * scale) // 1000 * 1000)
            rates[name].append(await case(nc, js, count))
            print(f"  round {r + 1}/{rounds}: {name:<44} {rates[name][-1]:>10,.0f} msgs/s", file=sys.stderr)
    await nc.close()
    return {name: statistics.median(values) for name, values in rates.items()}


def report(rates: dict[str, float]) -> None:
    core, one, window, atomic, fast = (rates[name] for name, _, _ in CASES)
    print(f"\n{'case':<46}{'msgs/s':>12}")
    for name, rate in rates.items():
        print(f"{name:<46}{rate:>12,.0f}")
    print(f"\n{'ratio':<46}{'measured':>10}{'target':>10}")
    for label, value, target in (
        ("fast ingest / publish_async", fast / window, 2.5),
        ("fast ingest / core publish", fast / core, 0.30),
        ("atomic batches / js.publish one at a time", atomic / one, 8.0),
    ):
        verdict = "ok" if value >= target else "BELOW"
        print(f"{label:<46}{value:>10.2f}{'>= ' + format(target, 'g'):>10}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store) as server:
        report(asyncio.run(run(server.url, args.rounds, args.scale)))


if __name__ == "__main__":
    main()
