"""How far History trails Live under `up --demo`, and what the analytics part costs, in one run.

    .venv/bin/python bench/lag.py [--minutes 4] [--mode follow|every|idle|load] [--rate 1000]

Starts `batch-console up --demo` (embedded nats-server, a fresh data directory; `--mode every`
runs the analytics part every 60 s as before `--follow`), then every second samples the event
log's last sequence (what Live has) and the analytics job's offset in SQLite (what History has).
An event at sequence s reached Live at the first sample whose last sequence is >= s and History
at the first whose offset is >= s; the lag is the difference, after the analytics part's first
run (Spark's start is not counted). Prints the lag's p50/p95/max and the analytics part's CPU
(cores) over the window. `--mode idle` runs `up` without the demo (no traffic at all) and prints
only the analytics part's CPU; `--mode quiet` the same after one demo round (its reader, canary and
collector go on: a log that is quiet but not empty). `--mode load` runs `up` without the demo while this process publishes
small fast-ingest batches, some with a gap, and an atomic batch left to be abandoned every few seconds,
until the event log grows by about `--rate` events a second. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from footprint import tree_memory  # noqa: E402
from measure import cpu_seconds, percentile  # noqa: E402
from console.broker.cluster import free_port  # noqa: E402
from console.storage import sqlite  # noqa: E402
from console.domain.events import LOST_KINDS  # noqa: E402
from console.storage.tables import EVENTS_SOURCE, AbandonedBatch  # noqa: E402
from sqlmodel import Session, select  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")


def tree_pids(pid: int) -> list[int]:
    """The process and every descendant (the analytics part's JVM is its child)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


class TreeCpu:
    """CPU seconds a process and its descendants used since this was made, sampled: one that ends
    between two samples keeps what it had used at the last (Spark's Python workers end when idle,
    and a sum over the live tree alone fell over an idle window)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.start = self._read()
        self.last = dict(self.start)

    def _read(self) -> dict[int, float]:
        found = {}
        for p in tree_pids(self.pid):
            try:
                found[p] = cpu_seconds(p)
            except OSError:  # ended meanwhile
                pass
        return found

    def sample(self) -> None:
        self.last.update(self._read())

    def seconds(self) -> float:
        return sum(used - self.start.get(p, 0.0) for p, used in self.last.items())


def analytics_pid(log: str) -> int | None:
    found = re.findall(r"\[up\] analytics: (?:restarted, )?running \(pid (\d+)\)", log)
    return int(found[-1]) if found else None


async def load(url: str, rate: float, stop: asyncio.Event) -> None:
    """Fast batches of 5 messages (one in ten with a gap: a loss) at about `rate` events a second in the
    event log (about 2.5 events a batch), and an atomic batch left open every 5 s (abandoned at the
    server's batch timeout)."""
    from nats.js.api import StreamConfig

    from console.broker.atomic import AtomicBatch
    from console.broker.fast import FastBatch
    from console.errors import BatchError

    nc = await nats.connect(url)
    await nc.jetstream().add_stream(StreamConfig(name="LOAD", subjects=["load.>"], allow_atomic=True,
                                                 allow_batched=True, max_msgs=100_000))
    per_second, sent, started, last_atomic = rate / 2.5, 0, time.monotonic(), 0.0
    while not stop.is_set():
        if time.monotonic() - last_atomic >= 5:
            last_atomic = time.monotonic()
            batch = AtomicBatch(nc)
            await batch.add("load.atomic", b"x")
            batch.discard()
        fast = FastBatch(nc, flow=5)
        try:
            for i in range(4):
                if i == 2 and sent % 10 == 0:
                    fast.skip_seq()
                await fast.add("load.fast", b"x" * 64)
            await fast.commit_eob()
        except BatchError:
            pass
        sent += 1
        ahead = sent / per_second - (time.monotonic() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)
    await nc.close()


class Ledger:
    """Each loss as the event log stores it (a subscription on the loss kinds' subjects) and when its row
    is in History's ledger (SQLite, asked every 0.2 s): the loss's own lag, not the job's offset's."""

    def __init__(self, engine):
        self.engine, self.arrived, self.lags = engine, {}, []

    async def on_loss(self, msg) -> None:
        self.arrived[json.loads(msg.data)["event_id"]] = time.monotonic()

    def look(self) -> None:
        if not self.arrived:
            return
        with Session(self.engine) as s:
            ids = list(self.arrived)
            found = s.exec(select(AbandonedBatch.event_id).where(AbandonedBatch.event_id.in_(ids))).all()
        now = time.monotonic()
        for event_id in found:
            self.lags.append(now - self.arrived.pop(event_id))


async def sample(url: str, db: Path, seconds: float, cpu: TreeCpu | None,
                 rate: float = 0.0) -> tuple[list[tuple[float, int, int]], Ledger]:
    stop = asyncio.Event()
    loader = asyncio.create_task(load(url, rate, stop)) if rate else None
    nc = await nats.connect(url)
    js = nc.jetstream()
    engine = sqlite.open_db(db)
    ledger = Ledger(engine)
    for kind in LOST_KINDS:
        await nc.subscribe(f"batch_console.events.{kind.value}.>", cb=ledger.on_loss)
    samples = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        last = (await js.stream_info("BATCH_CONSOLE_EVENTS")).state.last_seq
        samples.append((time.monotonic(), last, sqlite.offset(engine, EVENTS_SOURCE)))
        if cpu is not None:
            cpu.sample()
        for _ in range(5):
            ledger.look()
            await asyncio.sleep(0.2)
    stop.set()
    if loader is not None:
        await loader
    await nc.close()
    return samples, ledger


def lags(samples: list[tuple[float, int, int]]) -> list[float]:
    times = [t for t, _, _ in samples]
    lasts = [last for _, last, _ in samples]
    offsets = [offset for _, _, offset in samples]
    found = []
    for i in range(1, len(samples)):
        for seq in range(lasts[i - 1] + 1, lasts[i] + 1):  # the events that reached Live at sample i
            j = bisect.bisect_left(offsets, seq)
            if j < len(samples):
                found.append(times[j] - times[i])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=4)
    parser.add_argument("--mode", choices=("follow", "every", "idle", "quiet", "load"), default="follow")
    parser.add_argument("--rate", type=float, default=1000.0, help="--mode load: events a second to aim at")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data, nats_port = Path(tmp) / "data", free_port()
        every = {"follow": ["--demo"], "every": ["--demo", "--analytics-every", "60"], "idle": [], "load": [],
                 "quiet": ["--demo", "--demo-rounds", "1"]}[args.mode]
        out = Path(tmp) / "up.out"
        up = subprocess.Popen([CLI, "up", "--data-dir", str(data), "--nats-port", str(nats_port),
                               "--port", str(free_port()), *every], stdout=open(out, "w"),
                              stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "BATCH_CONSOLE_FOLLOW": "0" if args.mode == "every" else "1"})
        try:
            log = data / "logs" / "analytics.log"
            print("  waiting for the analytics part's first run …", file=sys.stderr)
            first = "analytics: " if args.mode in ("idle", "load") else "analytics: events"
            while not (log.exists() and first in log.read_text()):
                assert up.poll() is None, out.read_text()[-3000:]
                time.sleep(1)
            if args.mode == "quiet":  # the demo's one round written to History: from here on only what runs by itself
                time.sleep(30)
            pid = analytics_pid(out.read_text())
            cpu = TreeCpu(pid) if pid else None
            print(f"  sampling for {args.minutes} min …", file=sys.stderr)
            samples, ledger = asyncio.run(sample(f"nats://127.0.0.1:{nats_port}", data / "console.db", args.minutes * 60, cpu,
                                         args.rate if args.mode == "load" else 0.0))
            cores = cpu.seconds() / (samples[-1][0] - samples[0][0]) if cpu else float("nan")
            held = tree_memory(up.pid).get("analytics", 0)  # resident, its JVM and Spark's workers included
        finally:
            up.send_signal(signal.SIGTERM)
            up.wait(timeout=60)
            runs = [line for line in (data / "logs" / "analytics.log").read_text().splitlines() if "events " in line]
            print("  the analytics part's last runs:\n" + "\n".join("    " + line[-200:] for line in runs[-6:]),
                  file=sys.stderr)
    events = samples[-1][1] - samples[0][1]
    if args.mode in ("idle", "quiet"):
        print(f"mode {args.mode}: {events:,} events over {args.minutes} min; analytics part CPU {cores:.3f} cores "
              f"(its JVM included; target < 0.05), {held / 2**20:,.0f} MiB resident at the end")
        return
    found = lags(samples)
    seconds = samples[-1][0] - samples[0][0]
    losses = ledger.lags or [float("nan")]
    print(f"mode {args.mode}: {events:,} events over {args.minutes} min ({events / seconds:,.0f}/s); analytics part "
          f"CPU {cores:.2f} cores (its JVM included)\n"
          f"  a loss to its row in History's ledger (s): p50 {percentile(losses, 0.5):.1f}, "
          f"p95 {percentile(losses, 0.95):.1f}, max {max(losses):.1f} over {len(ledger.lags)} losses "
          f"({len(ledger.arrived)} not there at the end; target: p95 <= 5)\n"
          f"  the job's offset behind Live (s):     p50 {percentile(found, 0.5):.1f}, "
          f"p95 {percentile(found, 0.95):.1f}, max {max(found):.1f} (the hourly tables and the context)")


if __name__ == "__main__":
    main()
