"""Consumer lag against the truth, stalls against bursts, and the cost of reading many consumers: one run.

    .venv/bin/python bench/consumers.py [--seconds 20] [--burst-seconds 30] [--streams 100] [--per-stream 10]

1. Lag in seconds: a publisher sends 200 messages a second; a pull consumer fetches 100 a second, a push
   consumer acks 100 a second (max_ack_pending 50), an ordered consumer reads them all. The bench records
   when each message was stored (its PubAck) and which stream sequence each consumer was last given (the
   push and ordered ones as the messages arrive, before their handlers); at each read of the console it holds
   the console's lag against the truth: the age of the first message after the one last given.
2. Stalls: reads every second over a 5 s window (the alerts part reads every 10 s over 30 s; the same rules,
   scaled). A consumer stops: in how many windows is it stalled? A consumer reads at full speed while a
   burst publishes ten times the usual rate for --burst-seconds: how many of its reads say stalled (0 wanted)?
3. Cost: --streams streams of --per-stream consumers each, each consumer behind: one full read of them all
   (median of five) and the requests it took, beside one request per consumer (the CONSUMER.INFO way).

A benchmark, not a test: read the ratios (these machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats  # noqa: E402
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig  # noqa: E402

from console.broker.consumers import ConsumerAdmin  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.consumers import ConsumerWatch, only  # noqa: E402


def seq_of(reply: str) -> int:
    return int(reply.split(".")[-4])  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>


async def lag_truth(nc, seconds: float) -> dict[str, list[float]]:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="LAG", subjects=["lag.>"]))
    stored: dict[int, float] = {}
    last_given = {"pull": 0, "push": 0, "ordered": 0}
    stop = asyncio.Event()

    async def publish():
        while not stop.is_set():
            began = time.monotonic()
            acks = await asyncio.gather(*(js.publish("lag.x", b"m") for _ in range(20)))
            now = time.time()
            for ack in acks:
                stored[ack.seq] = now
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - began)))

    await js.add_consumer("LAG", ConsumerConfig(durable_name="pull", ack_policy=AckPolicy.EXPLICIT))
    pull = await js.pull_subscribe_bind("pull", "LAG")

    async def read_pull():
        while not stop.is_set():
            try:
                for m in await pull.fetch(10, timeout=1):
                    last_given["pull"] = max(last_given["pull"], m.metadata.sequence.stream)
                    await m.ack()
            except nats.errors.TimeoutError:
                pass
            await asyncio.sleep(0.1)

    inbox = nc.new_inbox()
    handled: asyncio.Queue = asyncio.Queue()

    async def arrived(msg):  # the server gave it: the truth's position, before the slow handler
        last_given["push"] = max(last_given["push"], seq_of(msg.reply))
        handled.put_nowait(msg)

    await nc.subscribe(inbox, cb=arrived)
    await js.add_consumer("LAG", ConsumerConfig(durable_name="push", deliver_subject=inbox, ack_policy=AckPolicy.EXPLICIT,
                                                max_ack_pending=50))

    async def handle_push():
        while not stop.is_set():
            msg = await handled.get()
            await msg.ack()
            await asyncio.sleep(0.01)

    async def ordered_seen(msg):
        last_given["ordered"] = max(last_given["ordered"], msg.metadata.sequence.stream)

    ordered = await js.subscribe("lag.>", ordered_consumer=True, cb=ordered_seen)
    tasks = [asyncio.create_task(t()) for t in (publish, read_pull, handle_push)]
    watch = ConsumerWatch(ConsumerAdmin(lambda: nc, lambda: False), only(["LAG"]))
    errors: dict[str, list[float]] = {"pull": [], "push": [], "ordered": []}
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        await asyncio.sleep(1.0)
        position = dict(last_given)
        reading = await watch.read(fresh_within=0)
        at = time.time()
        for j in reading.judged:
            kind = j.read.kind
            if kind not in errors or j.lag_seconds is None:
                continue
            following = [s for s in stored if s > position[kind]]
            truth = at - stored[min(following)] if following else 0.0
            errors[kind].append(abs(j.lag_seconds - truth))
    stop.set()
    for t in tasks:
        t.cancel()
    await ordered.unsubscribe()
    return errors


async def stalls(nc, burst_seconds: float) -> tuple[float | None, int, int, int]:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="STALL", subjects=["stall.>"]))
    for name in ("stops", "keeps_up"):
        await js.add_consumer("STALL", ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT))
    stops, keeps_up = [await js.pull_subscribe_bind(n, "STALL") for n in ("stops", "keeps_up")]
    window = 5.0
    watch = ConsumerWatch(ConsumerAdmin(lambda: nc, lambda: False), only(["STALL"]),
                          window=timedelta(seconds=window))
    rate = {"per_tick": 10}  # messages each 0.1 s: 100 a second, ten times that in the burst
    stopped = asyncio.Event()
    done = asyncio.Event()

    async def publish():
        while not done.is_set():
            await asyncio.gather(*(js.publish("stall.x", b"s") for _ in range(rate["per_tick"])))
            await asyncio.sleep(0.1)

    async def read(sub, halt: asyncio.Event | None):
        while not done.is_set():
            if halt is not None and halt.is_set():
                await asyncio.sleep(0.1)
                continue
            try:
                for m in await sub.fetch(200, timeout=0.5):
                    await m.ack()
            except nats.errors.TimeoutError:
                pass

    tasks = [asyncio.create_task(publish()), asyncio.create_task(read(stops, stopped)),
             asyncio.create_task(read(keeps_up, None))]
    for _ in range(int(window) + 2):  # a window of healthy reads first
        await watch.read(fresh_within=0)
        await asyncio.sleep(1.0)
    stopped.set()
    stop_at, raised_at = time.monotonic(), None
    rate["per_tick"] = 100  # the burst
    burst_reads = burst_stalled = 0
    began = time.monotonic()
    while time.monotonic() - began < burst_seconds:
        for j in (await watch.read(fresh_within=0)).judged:
            if j.read.name == "stops" and j.state == "stalled" and raised_at is None:
                raised_at = time.monotonic()
            if j.read.name == "keeps_up":
                burst_reads += 1
                burst_stalled += j.state == "stalled"
        await asyncio.sleep(1.0)
    lagging = sum(j.state == "lagging" for j in watch.last.judged if j.read.name == "keeps_up")
    done.set()
    for t in tasks:
        t.cancel()
    return (None if raised_at is None else (raised_at - stop_at) / window), burst_reads, burst_stalled, lagging


async def cost(nc, streams: int, per_stream: int) -> tuple[float, int, float, int]:
    js = nc.jetstream()
    names = [f"MANY{i}" for i in range(streams)]
    gate = asyncio.Semaphore(64)

    async def made(name: str) -> None:
        await js.add_stream(StreamConfig(name=name, subjects=[name.lower()]))
        await js.publish(name.lower(), b"x")
        for c in range(per_stream):
            async with gate:
                await js.add_consumer(name, ConsumerConfig(durable_name=f"c{c}", ack_policy=AckPolicy.EXPLICIT))

    await asyncio.gather(*(made(n) for n in names))
    admin = ConsumerAdmin(lambda: nc, lambda: False)
    times, requests = [], 0
    for _ in range(5):
        began = time.perf_counter()
        found = await admin.read(names)
        times.append(time.perf_counter() - began)
        requests = found.requests
        assert len(found.consumers) == streams * per_stream, len(found.consumers)
    one_by_one = []
    for _ in range(2):
        began = time.perf_counter()
        for n in names:
            for c in range(per_stream):
                await nc.request(f"$JS.API.CONSUMER.INFO.{n}.c{c}", b"", timeout=5)
        one_by_one.append(time.perf_counter() - began)
    return statistics.median(times), requests, statistics.median(one_by_one), streams * per_stream


async def first_paint(url: str, data_dir: Path, runs: int = 3) -> list[float]:
    """The Consumers page in a fresh Chromium context at 1280 px, from the navigation to its last stream's row."""
    from playwright.async_api import async_playwright

    from console.broker.cluster import free_port

    port = free_port()
    web = subprocess.Popen([sys.executable, "-m", "console.cli", "serve", "--server", url, "--data-dir", str(data_dir),
                            "--port", str(port)], stdout=open(data_dir / "web.log", "w"), stderr=subprocess.STDOUT)
    times = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            for run in range(runs + 1):  # the first warms the process, and is not counted
                context = await browser.new_context(viewport={"width": 1280, "height": 800})
                page = await context.new_page()
                while True:
                    started = time.monotonic()
                    try:
                        await page.goto(f"http://127.0.0.1:{port}/consumers", wait_until="commit")
                        break
                    except Exception:
                        await asyncio.sleep(0.2)
                await page.get_by_text("1000 consumer(s)").wait_for(state="visible", timeout=120_000)
                if run:
                    times.append(time.monotonic() - started)
                await context.close()
            await browser.close()
    finally:
        web.terminate()
        web.wait(timeout=20)
    return times


async def main(args) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        nc = await nats.connect(server.url)
        errors = await lag_truth(nc, args.seconds)
        windows, burst_reads, burst_stalled, lagging = await stalls(nc, args.burst_seconds)
        await nc.jetstream().delete_stream("LAG")
        await nc.jetstream().delete_stream("STALL")
        read_s, requests, info_s, consumers = await cost(nc, args.streams, args.per_stream)
        (Path(tmp) / "data").mkdir()
        paints = await first_paint(server.url, Path(tmp) / "data")
        await nc.close()
    print("lag in seconds against the truth (|console - truth|, s)")
    print(f"{'consumer':<10} {'reads':>6} {'p50':>7} {'p95':>7} {'max':>7}")
    for kind, found in errors.items():
        if found:
            q = sorted(found)
            print(f"{kind:<10} {len(q):>6} {statistics.median(q):>7.3f} {q[int(0.95 * (len(q) - 1))]:>7.3f} {q[-1]:>7.3f}")
    print()
    print("stalls (window 5 s, a read a second)")
    print(f"  a consumer that stops: stalled after {'never' if windows is None else f'{windows:.2f} windows'}")
    print(f"  a consumer reading a 10x burst at full speed: stalled at {burst_stalled} of {burst_reads} reads "
          f"(lagging at the end: {'yes' if lagging else 'no'})")
    print()
    print(f"cost of one full read: {consumers:,} consumers on {args.streams} streams")
    print(f"  console (list pages + message gets): {read_s:.3f} s, {requests} requests")
    print(f"  one CONSUMER.INFO each, in turn:      {info_s:.3f} s, {consumers} requests  ({info_s / read_s:.1f}x)")
    print(f"  the Consumers page's first paint (all {consumers:,} rows, Chromium 1280 px): p50 "
          f"{statistics.median(paints):.2f} s, max {max(paints):.2f} s")
    print(json.dumps({"lag_error_max_s": {k: max(v) if v else None for k, v in errors.items()},
                      "stall_windows": windows, "burst_stalled": burst_stalled, "read_s": round(read_s, 3),
                      "requests": requests, "paint_s": round(statistics.median(paints), 3)}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--burst-seconds", type=float, default=30.0)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--per-stream", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
