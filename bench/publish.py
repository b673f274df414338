"""Publish throughput, side by side in one run against one embedded nats-server.

    .venv/bin/python bench/publish.py [--rounds 3] [--scale 1.0] [--sizes 128,4096]

Messages of each size to a file-storage R1 stream (a fresh stream per measurement). Prints msgs/s
(median of the rounds, with the spread) and the ratios the issues set as targets. The baselines:
core publish (no acks), nats-py's JetStream publishes, and a plain loop of each batch kind written
from the protocol in plain Python on nats-py's publish (what a user would write without this
package). A benchmark, not a test: the machines are shared and noisy, so read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nats
from nats.js.api import StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import cpu_seconds  # noqa: E402
from console.broker.atomic import AtomicBatch  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402

PAYLOAD = b"x" * 128  # the size being measured (main sets it per size)
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


async def fast_ingest(nc, js, n: int, flow: int | None = None) -> float:
    start = time.perf_counter()
    batch = FastBatch(nc) if flow is None else FastBatch(nc, flow=flow)  # its defaults: flow 500, 2 acks out
    for _ in range(n - 1):
        await batch.add(SUBJECT, PAYLOAD)
    ack = await batch.commit(SUBJECT, PAYLOAD)
    assert ack.count == n, ack
    return n / (time.perf_counter() - start)


async def fast_ingest_100(nc, js, n: int) -> float:
    return await fast_ingest(nc, js, n, flow=100)


async def plain_fast_loop(nc, js, n: int) -> float:
    """Fast ingest from the protocol, plainly: each message published with its reply subject, two flow
    windows of 500 (the most the server grants) out at most, acks read from JSON, then a commit."""
    inbox, batch = nc.new_inbox(), uuid.uuid4().hex
    head = f"{inbox}.{batch}.500.fail."
    state = {"acked": 0, "flow": 500}
    moved, done = asyncio.Event(), asyncio.get_running_loop().create_future()

    async def on_reply(msg) -> None:
        reply = json.loads(msg.data)
        if reply.get("type") == "ack":
            state["acked"], state["flow"] = max(state["acked"], reply["seq"]), reply["msgs"]
            moved.set()
        elif "count" in reply and not done.done():
            done.set_result(reply)

    sub = await nc.subscribe(f"{inbox}.>", cb=on_reply)
    start = time.perf_counter()
    await nc.publish(SUBJECT, PAYLOAD, f"{head}1.0.$FI")
    while not moved.is_set():
        await moved.wait()
    for seq in range(2, n):
        await nc.publish(SUBJECT, PAYLOAD, f"{head}{seq}.1.$FI")
        while state["acked"] + 2 * state["flow"] <= seq:
            moved.clear()
            await moved.wait()
    await nc.publish(SUBJECT, PAYLOAD, f"{head}{n}.2.$FI")
    ack = await asyncio.wait_for(done, 30)
    assert ack["count"] == n, ack
    rate = n / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate


async def plain_atomic_loop(nc, js, n: int) -> float:
    """Atomic batches of 1000 from the protocol, plainly: the first message a request (the server's
    answer says the batch is open), then publishes with the batch headers, the last a commit request."""
    start = time.perf_counter()
    for _ in range(n // 1000):
        batch = uuid.uuid4().hex
        await nc.request(SUBJECT, PAYLOAD, timeout=5, headers={"Nats-Batch-Id": batch, "Nats-Batch-Sequence": "1"})
        for seq in range(2, 1000):
            await nc.publish(SUBJECT, PAYLOAD, headers={"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(seq)})
        ack = json.loads((await nc.request(SUBJECT, PAYLOAD, timeout=5, headers={
            "Nats-Batch-Id": batch, "Nats-Batch-Sequence": "1000", "Nats-Batch-Commit": "1"})).data)
        assert ack.get("count") == 1000, ack
    return n / (time.perf_counter() - start)


CASES = [
    ("core publish, no acks (until stored)", core_publish, 200_000),
    ("nats-py js.publish, one at a time", js_publish, 10_000),
    ("nats-py publish_async, 4000 pending", js_publish_async, 100_000),
    ("a plain atomic loop, batches of 1000", plain_atomic_loop, 50_000),
    ("atomic batches of 1000", atomic_batches, 50_000),
    ("a plain fast-ingest loop, flow 500", plain_fast_loop, 200_000),
    ("fast ingest, flow 100", fast_ingest_100, 200_000),
    ("fast ingest (flow 500, 2 acks out)", fast_ingest, 200_000),
]
BIG = 1024  # at this size and past it, each case sends a quarter as many messages


async def run(url: str, server_pid: int, rounds: int, scale: float) -> tuple[dict[str, list[float]], dict]:
    """msgs/s of each case per round, and (this process's, the server's) CPU-seconds per message."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    rates: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    cpu: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in CASES}
    for r in range(rounds):
        for name, case, n in CASES:
            await fresh_stream(js)
            count = max(1000, int(n * scale / (4 if len(PAYLOAD) >= BIG else 1)) // 1000 * 1000)
            ours, server = time.process_time(), cpu_seconds(server_pid)
            rates[name].append(await case(nc, js, count))
            cpu[name].append(((time.process_time() - ours) / count, (cpu_seconds(server_pid) - server) / count))
            print(f"  {len(PAYLOAD)} B, round {r + 1}/{rounds}: {name:<44} {rates[name][-1]:>10,.0f} msgs/s",
                  file=sys.stderr)
    await nc.close()
    return rates, {name: tuple(statistics.median(c[i] for c in found) for i in (0, 1)) for name, found in cpu.items()}


def report(size: int, rates: dict[str, list[float]], cpu: dict) -> None:
    median = {name: statistics.median(values) for name, values in rates.items()}
    core, one, window, plain_atomic, atomic, plain_fast, _, fast = (median[name] for name, _, _ in CASES)
    print(f"\n{size}-byte messages: {'case':<46}{'msgs/s':>12}  {'spread of the rounds':<22}"
          f"{'CPU µs a message: ours':>24}{'server':>8}")
    for name, rate in median.items():
        spread = f"{min(rates[name]):,.0f} to {max(rates[name]):,.0f}"
        print(f"{'':<20}{name:<46}{rate:>12,.0f}  {spread:<22}{cpu[name][0] * 1e6:>24.2f}{cpu[name][1] * 1e6:>8.2f}")
    print(f"\n{'':<20}{'ratio':<52}{'measured':>10}{'target':>10}")
    for label, value, target in (
        ("fast ingest / core publish", fast / core, 0.75),
        ("  the server's bound: its CPU a message, core / fast", cpu[CASES[0][0]][1] / cpu[CASES[-1][0]][1], None),
        ("fast ingest / publish_async (the plain JetStream loop)", fast / window, 2.0),
        ("atomic batches / publish_async", atomic / window, 0.9),
        ("fast ingest / a plain fast-ingest loop, flow 500", fast / plain_fast, None),
        ("atomic batches / a plain atomic loop", atomic / plain_atomic, None),
        ("atomic batches / js.publish one at a time", atomic / one, 8.0),
    ):
        verdict = "" if target is None else "ok" if value >= target else "BELOW"
        print(f"{'':<20}{label:<52}{value:>10.2f}{'' if target is None else '>= ' + format(target, 'g'):>10}  {verdict}")


def main() -> None:
    global PAYLOAD
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    parser.add_argument("--sizes", default="128,4096", help="message sizes in bytes, comma-separated")
    args = parser.parse_args()
    found = {}
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store) as server:
        for size in (int(s) for s in args.sizes.split(",")):
            PAYLOAD = b"x" * size
            found[size] = asyncio.run(run(server.url, server.pid, args.rounds, args.scale))
    for size, (rates, cpu) in found.items():
        report(size, rates, cpu)


if __name__ == "__main__":
    main()
