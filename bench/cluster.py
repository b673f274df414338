"""The collector on a three-node nats-server cluster, side by side in one run.

    .venv/bin/python bench/cluster.py [--changes 50] [--messages 60000]

1. Naming a lost fast batch. For each of --changes leader changes of an R3 stream (a stepdown,
   then the new leader elected), a fast-ingest message of a batch the new leader does not know:
   the server answers 10208, as it does to every later message of a batch it lost. From its
   publication: when a bare nats-py subscriber on the same `$FI` replies has the refusal, and when
   the collector's `fast_lost` for it is in the event log; p50 and p95 of each, their ratio, and how
   many of the losses the collector put down to the leader change.
   (On nats-server 2.15.1 a batch open across a stepdown carried on in every run here, and a node's
   death gave the publisher 503s that reach no other subscriber, so a 10208 is staged this way.)
2. Collector CPU at full fast-ingest rate: the same fast batches (flow 10) published on one node and
   on the cluster (R3 stream), the collector's CPU-seconds per 1000 acks on each, and the ratio.

A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nats
from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import cpu_seconds, percentile, until  # noqa: E402
from console.broker.admin import StreamAdmin  # noqa: E402
from console.broker.cluster import EmbeddedCluster  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import BatchLimits, EmbeddedServer  # noqa: E402
from console.domain.events import EventKind, event_from_json  # noqa: E402
from console.progress import ProgressBar  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")
LIMITS = BatchLimits(timeout=5.0)
EVENTS = "batch_console.events"


def start_collector(urls: str, data: Path) -> subprocess.Popen:
    log = open(data / "collector.log", "w")
    return subprocess.Popen([CLI, "collect", "--server", urls, "--data-dir", str(data), "--cpu", "normal"], stdout=log,
                            stderr=subprocess.STDOUT)


async def collector_ready(proc: subprocess.Popen, data: Path) -> None:
    """Its own line saying it collects (the durable consumer may be an earlier collector's)."""
    async def ready():
        assert proc.poll() is None, (data / "collector.log").read_text()[-2000:]
        return "collecting into" in (data / "collector.log").read_text()
    await until(ready, 60, "the collector did not start")


async def r3_stream(nc, name: str, replicas: int) -> StreamAdmin:
    admin = StreamAdmin(nc)

    async def created():
        try:
            await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"],
                                                         num_replicas=replicas, allow_batched=True))
            return True
        except Exception:
            return False
    await until(created, 60, f"{name} not created")
    if replicas > 1:
        await until(lambda: admin.leader(name), 60, f"{name} has no leader")
    return admin


async def naming_losses(cluster: EmbeddedCluster, changes: int) -> None:
    client = await nats.connect(cluster.urls)
    bare = await nats.connect(cluster.urls)
    watch = await nats.connect(cluster.urls)
    admin = await r3_stream(client, "BENCH_LOST", 3)
    sent: dict[str, float] = {}
    seen_bare: dict[str, float] = {}
    logged: dict[str, tuple[float, str]] = {}

    async def on_reply(msg):
        batch = msg.subject.rsplit(".", 6)[-6] if msg.subject.endswith(".$FI") else None
        if batch in sent and b"10208" in msg.data:
            seen_bare.setdefault(batch, time.perf_counter())

    async def on_event(msg):
        event = event_from_json(msg.data)
        if event.kind is EventKind.FAST_LOST and event.batch_id in sent:
            logged.setdefault(event.batch_id, (time.perf_counter(), event.reason))

    await bare.subscribe("_INBOX.>", cb=on_reply)
    await watch.subscribe(f"{EVENTS}.{EventKind.FAST_LOST.value}.>", cb=on_event)
    await bare.flush()
    await watch.flush()
    bar = ProgressBar(changes, "leader changes")
    inbox = client.new_inbox()
    for i in range(changes):
        before = await admin.leader("BENCH_LOST")
        await admin.step_down("BENCH_LOST")
        await until(lambda: _changed(admin, before), 60, "no new leader")
        batch = uuid.uuid4().hex
        sent[batch] = time.perf_counter()
        await client.publish("bench_lost.x", b"x", reply=f"{inbox}.{batch}.10.fail.2.1.$FI")
        await until(lambda: batch in logged and batch in seen_bare, 30, "the refusal never arrived")
        bar.update(i + 1)
    bar.close()
    bare_ms = [1000 * (seen_bare[b] - t) for b, t in sent.items()]
    log_ms = [1000 * (logged[b][0] - t) for b, t in sent.items()]
    leader = sum(1 for _, reason in logged.values() if reason == "leader_change")
    print(f"\n1. Naming a lost fast batch, {changes} leader changes of an R3 stream (ms from the refused message's "
          "publication)")
    print(f"{'':34}{'p50':>10}{'p95':>10}")
    print(f"{'  bare subscriber has the 10208':34}{percentile(bare_ms, 0.5):>10.2f}{percentile(bare_ms, 0.95):>10.2f}")
    print(f"{'  fast_lost in the event log':34}{percentile(log_ms, 0.5):>10.2f}{percentile(log_ms, 0.95):>10.2f}")
    print(f"{'  ratio (target <= 2)':34}{percentile(log_ms, 0.5) / percentile(bare_ms, 0.5):>10.2f}"
          f"{percentile(log_ms, 0.95) / percentile(bare_ms, 0.95):>10.2f}")
    print(f"  reason leader_change: {leader} of {len(logged)}")
    for conn in (client, bare, watch):
        await conn.close()


async def _changed(admin: StreamAdmin, before: str) -> bool:
    try:
        return (await admin.leader("BENCH_LOST")) not in (None, before)
    except Exception:
        return False


async def collector_cpu(urls: list[str], replicas: int, data: Path, messages: int) -> tuple[float, int, float]:
    """(CPU-seconds per 1000 acks, acks, publisher msgs/s) of a collector tapping `messages` at flow 10."""
    data.mkdir(parents=True, exist_ok=True)
    collector = start_collector(",".join(urls), data)
    client = await nats.connect(urls)
    try:
        await collector_ready(collector, data)
        await r3_stream(client, "BENCH_RATE", replicas)
        committed: set[str] = set()

        async def on_event(msg):
            event = event_from_json(msg.data)
            if event.kind is EventKind.FAST_COMMITTED:
                committed.add(event.batch_id)
        await client.subscribe(f"{EVENTS}.{EventKind.FAST_COMMITTED.value}.>", cb=on_event)
        before = cpu_seconds(collector.pid)
        started, ids, acks = time.perf_counter(), [], 0
        per_batch = 10_000
        for _ in range(max(1, messages // per_batch)):
            batch = FastBatch(client, flow=10)
            for _ in range(per_batch - 1):
                await batch.add("bench_rate.x", b"x" * 128)
            await batch.commit("bench_rate.x", b"x" * 128)
            ids.append(batch.batch_id)
            acks += batch.acks
        rate = len(ids) * per_batch / (time.perf_counter() - started)
        await until(lambda: committed >= set(ids), 120,
                    f"the collector did not log every commit:\n{(data / 'collector.log').read_text()[-2000:]}")
        used = cpu_seconds(collector.pid) - before
        return 1000 * used / max(acks, 1), acks, rate
    finally:
        await client.close()
        collector.send_signal(signal.SIGTERM)
        collector.wait(30)


async def run(args, tmp: Path) -> None:
    with EmbeddedCluster(tmp / "cluster", 3, batch_limits=LIMITS) as cluster:
        data = tmp / "cluster-collector"
        data.mkdir()
        collector = start_collector(cluster.url, data)
        try:
            await collector_ready(collector, data)
            await naming_losses(cluster, args.changes)
        finally:
            collector.send_signal(signal.SIGTERM)
            collector.wait(30)
        cluster_cpu = await collector_cpu(cluster.urls, 3, tmp / "cpu-cluster", args.messages)
    with EmbeddedServer(tmp / "single", batch_limits=LIMITS) as server:
        single_cpu = await collector_cpu([server.url], 1, tmp / "cpu-single", args.messages)
    print(f"\n2. Collector CPU at full fast-ingest rate (flow 10, {args.messages:,} messages)")
    print(f"{'':24}{'CPU-s/1000 acks':>16}{'acks':>10}{'publisher msgs/s':>18}")
    for label, (cpu, acks, rate) in (("  one node", single_cpu), ("  3-node cluster, R3", cluster_cpu)):
        print(f"{label:24}{cpu:>16.4f}{acks:>10,}{rate:>18,.0f}")
    print(f"  ratio cluster / one node: {cluster_cpu[0] / single_cpu[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--messages", type=int, default=60_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
