"""The analytics job's speed, side by side in one run (warm Spark session, one embedded server).

    .venv/bin/python bench/analytics.py [--events 1000000] [--days 100]

1. Fill an event log with synthetic events spread over --days days (fast batches of ~100 events
   with gaps and outcomes, abandonments, context).
2. Read the whole log: the jetstream data source with 2 partitions vs a bare nats-py ordered
   consumer (target: the source >= 50% of it).
3. The full pipeline (read + transforms + SQLite + Delta) over everything, twice: the session's
   first run (cold: the JVM compiles the job's code) and again into a new directory (warm), each
   against the bare read (target: warm <= 2.5x).
4. 10% more events on later days, then an incremental run, vs a full recompute of everything
   from an empty data directory (target: incremental <= 0.25x).
5. A small run on the warm session: 1,000 new events on the last day, three times; each run's
   seconds and where they went by stage (target: <= 2 s).
6. The driver's peak memory (the run's Python process and its JVM, resident, sampled every 0.1 s)
   over a run of 10,000 new events vs one of --memory-events (5,000,000; 0 skips it), each a process
   of its own, on a standalone master and worker started here from pyspark's launchers, so the
   executor (its JVM and Python workers, measured apart) is not the driver (target: < 1.2x).
   --memory-master local: in local mode instead, where one JVM is driver and executor.
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.analytics.job import JobSettings, run_once, spark_session  # noqa: E402
from lag import tree_pids  # noqa: E402
from console.analytics.source import JetStreamDataSource, SourceOptions  # noqa: E402
from console.broker.eventlog import EventLog  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.domain.events import BatchEvent, EventKind  # noqa: E402
from console.progress import ProgressBar  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
STREAMS = ["ORDERS", "PAYMENTS", "METRICS", "AUDIT"]


def synthetic(first_day: int, days: int, count: int, seed: int) -> list[BatchEvent]:
    """~100 events per fast batch (started, flow changes, progress, gaps, an outcome), plus
    atomic abandonments and context around them."""
    rng = random.Random(seed)
    events: list[BatchEvent] = []
    n = 0
    while len(events) < count:
        n += 1
        t = START + timedelta(days=first_day + rng.randrange(days), seconds=rng.randrange(86_400))
        stream = rng.choice(STREAMS)
        batch = f"s{seed}b{n}"
        if rng.random() < 0.1:
            events.append(BatchEvent(f"{batch}.adv", EventKind.ATOMIC_ABANDONED, t, stream, batch,
                                     reason=rng.choice(["timeout", "incomplete", "large", "unsupported"])))
            events.append(BatchEvent(f"{batch}.ctx", EventKind.CONTEXT, t - timedelta(seconds=30), stream,
                                     reason="update", detail="stream_action"))
            continue
        mode = rng.choice(["ok", "fail"])
        events.append(BatchEvent(f"{batch}.s", EventKind.FAST_STARTED, t, None, batch, gap_mode=mode, flow=100))
        for i in range(90):
            events.append(BatchEvent(f"{batch}.p{i}", EventKind.FAST_PROGRESS, t + timedelta(seconds=i), None, batch,
                                     gap_mode=mode, flow=100, seq=i * 100, acks=10))
        gaps = rng.choice([0, 0, 0, 1, 2])
        for g in range(gaps):
            events.append(BatchEvent(f"{batch}.g{g}", EventKind.FAST_GAP, t + timedelta(seconds=50 + g), None, batch,
                                     gap_mode=mode, seq=5000 + g, first_lost_seq=4990 + g, lost=10))
        end = t + timedelta(seconds=95)
        if gaps and mode == "fail":
            events.append(BatchEvent(f"{batch}.x", EventKind.FAST_ENDED_EARLY, end, stream, batch, gap_mode=mode,
                                     reason="gap", count=4990))
        else:
            events.append(BatchEvent(f"{batch}.c", EventKind.FAST_COMMITTED, end, stream, batch, gap_mode=mode,
                                     count=9000, stream_seq=n, eob=False))
    return events[:count]


async def fill(url: str, events: list[BatchEvent]) -> None:
    nc = await nats.connect(url)
    log = EventLog(nc.jetstream())
    await log.ensure()
    bar = ProgressBar(len(events), "filling the event log")
    for i in range(0, len(events), 5000):
        await log.append(events[i:i + 5000])
        bar.update(i + 5000)
    bar.close()
    await nc.close()


def fill_many(url: str, count: int, days: int, seed: int) -> None:
    """`count` synthetic events made and sent 200,000 at a time (millions do not fit in memory at once)."""
    for i, first in enumerate(range(0, count, 200_000)):
        asyncio.run(fill(url, synthetic(0, days, min(200_000, count - first), seed=seed * 1000 + i)))


def peaks(url: str, data_dir: Path, master: str | None, executors: int | None) -> tuple[int, float, list[int]]:
    """A run in a process of its own: (events read, seconds, peak resident bytes of the Python driver,
    of the driver's JVM, of the executors: the process tree under `executors`, the worker, but it)."""
    code = ("import sys; from pathlib import Path; from console.analytics.job import JobSettings, run_once, "
            "spark_session; from console.analytics.source import SourceOptions; s = spark_session(sys.argv[3] or None); "
            "r = run_once(lambda: s, JobSettings(Path(sys.argv[2]), SourceOptions.parse({'servers': sys.argv[1], "
            "'partitions': '2'}))); print(r.events_read, r.seconds)")
    proc = subprocess.Popen([sys.executable, "-c", code, url, str(data_dir), master or ""], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1],
                            env={**os.environ, "SPARK_EXECUTOR_MEMORY": "3g"})  # the worker offers 4g
    peak, done = [0, 0, 0], threading.Event()

    def rss(pids) -> int:
        total = 0
        for pid in pids:
            try:
                total += int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) * 1024
            except (OSError, IndexError):
                pass
        return total

    def sample():
        while not done.is_set():
            driver = tree_pids(proc.pid)
            now = [rss(driver[:1]), rss(driver[1:]), rss(tree_pids(executors)[1:]) if executors else 0]
            peak[:] = [max(a, b) for a, b in zip(peak, now)]
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    assert proc.returncode == 0, out
    events, seconds = out.split()[-2:]
    return int(events), float(seconds), peak


async def bare_read(url: str) -> tuple[int, float]:
    """A plain nats-py ordered consumer over the whole log, receiving every message."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    last = (await js.stream_info("BATCH_CONSOLE_EVENTS")).state.last_seq
    start = time.perf_counter()
    sub = await js.subscribe("batch_console.events.>", ordered_consumer=True,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    n = 0
    async for msg in sub.messages:
        n += 1
        if msg.metadata.sequence.stream >= last:
            break
    seconds = time.perf_counter() - start
    await sub.unsubscribe()
    await nc.close()
    return n, seconds


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=100)
    parser.add_argument("--memory-events", type=int, default=5_000_000)
    parser.add_argument("--memory-only", action="store_true", help="section 6 alone")
    parser.add_argument("--memory-master", choices=("standalone", "local"), default="standalone")
    args = parser.parse_args()
    if not args.memory_only:
        speed(args)
    if args.memory_events:
        memory(args.memory_events, args.memory_master)


def speed(args) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        tmp = Path(tmp)
        asyncio.run(fill(server.url, synthetic(0, args.days, args.events, seed=1)))
        spark = spark_session()
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(JetStreamDataSource)
        source = SourceOptions.parse({"servers": server.url, "partitions": "2"})

        spark.read.format("jetstream").options(**source).option("end_seq", 1000).load().count()  # warm up
        (read_n, read_s) = timed(lambda: spark.read.format("jetstream").options(**source).load().count())
        bare_n, bare_s = asyncio.run(bare_read(server.url))

        # The session's first run pays the JVM's compiling of the job's code (the scope and aggregates
        # ran 2-3x slower); a second run over the same events, into a new directory, is the warm figure.
        cold, cold_s = timed(lambda: run_once(lambda: spark, JobSettings(tmp / "cold", source=source)))
        full_dir = tmp / "full"
        report, full_s = timed(lambda: run_once(lambda: spark, JobSettings(full_dir, source=source)))

        more = args.events // 10
        asyncio.run(fill(server.url, synthetic(args.days, max(1, args.days // 10), more, seed=2)))
        incremental, incr_s = timed(lambda: run_once(lambda: spark, JobSettings(full_dir, source=source)))
        shutil.rmtree(tmp / "again", ignore_errors=True)
        recompute, recompute_s = timed(lambda: run_once(lambda: spark, JobSettings(tmp / "again", source=source)))
        small = []
        for i in range(3):
            asyncio.run(fill(server.url, synthetic(args.days + max(1, args.days // 10) - 1, 1, 1000, seed=3 + i)))
            small.append(run_once(lambda: spark, JobSettings(full_dir, source=source)))
        spark.stop()

    print(f"\n{'read of the event log':<56}{'events':>10}{'seconds':>10}{'events/s':>12}")
    print(f"{'  jetstream data source, 2 partitions':<56}{read_n:>10,}{read_s:>10.2f}{read_n / read_s:>12,.0f}")
    print(f"{'  bare nats-py ordered consumer':<56}{bare_n:>10,}{bare_s:>10.2f}{bare_n / bare_s:>12,.0f}")
    print(f"{'  source / bare (target >= 0.5)':<56}{(read_n / read_s) / (bare_n / bare_s):>32.2f}")
    print(f"\n{'the job (read + transforms + SQLite + Delta)':<56}{'events':>10}{'seconds':>10}{'events/s':>12}")
    print(f"{'  full run, first of the session (cold)':<56}{cold.events_read:>10,}{cold_s:>10.2f}"
          f"{cold.events_read / cold_s:>12,.0f}")
    print(f"    where it went (s): {cold.breakdown()}")
    print(f"{'  full run, warm session':<56}{report.events_read:>10,}{full_s:>10.2f}{report.events_read / full_s:>12,.0f}")
    print(f"    where it went (s): {report.breakdown()}")
    print(f"{'  cold full run / bare read':<56}{cold_s / bare_s:>32.2f}")
    print(f"{'  warm full run / bare read (target <= 2.5)':<56}{full_s / bare_s:>32.2f}")
    print(f"{'  incremental run over 10% new events':<56}{incremental.events_read:>10,}{incr_s:>10.2f}")
    print(f"{'  full recompute of everything':<56}{recompute.events_read:>10,}{recompute_s:>10.2f}")
    print(f"{'  incremental / full recompute (target <= 0.25)':<56}{incr_s / recompute_s:>32.2f}")
    print("\nsmall runs, 1,000 new events each, warm session (target <= 2 s)")
    for report in small:
        print(f"  {report.events_read:,} events {report.seconds:.2f} s: {report.breakdown()}")


def memory(events: int, master: str) -> None:
    from tests.spark_cluster import standalone_cluster

    runs = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server, ExitStack() as stack:
        url, worker = None, None
        if master == "standalone":
            url, _, worker_proc = stack.enter_context(standalone_cluster(Path(tmp), worker_memory="4g"))
            worker = worker_proc.pid
        for n in (10_000, events):
            fill_many(server.url, n - (runs[-1][0] if runs else 0), 10, seed=10 + len(runs))
            runs.append(peaks(server.url, Path(tmp) / f"data-{n}", url, worker))
    print(f"\npeak resident memory of one run in its own process, {master} (MB)")
    print(f"{'':<28}{'events':>10}{'seconds':>9}{'driver':>9}{'its JVM':>9}{'driver+JVM':>12}{'executors':>11}")
    for n, seconds, (python, jvm, executor) in runs:
        print(f"{'  run over the new events':<28}{n:>10,}{seconds:>9.1f}{python / 2**20:>9,.0f}{jvm / 2**20:>9,.0f}"
              f"{(python + jvm) / 2**20:>12,.0f}{executor / 2**20:>11,.0f}")
    (_, _, small), (_, _, large) = runs
    ratios = [b / a if a else 0 for a, b in zip(small + [small[0] + small[1]], large + [large[0] + large[1]])]
    print(f"{'  largest / smallest':<47}{ratios[0]:>9.2f}{ratios[1]:>9.2f}{ratios[3]:>12.2f}"
          f"{ratios[2]:>11.2f}   (target: the driver < 1.2)")


if __name__ == "__main__":
    main()
