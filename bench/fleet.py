"""Several NATS systems in one console, beside one system, in one run.

    .venv/bin/python bench/fleet.py [--streams 1000] [--runs 5] [--messages 30000]

Three embedded nats-servers with --streams streams each, and a fourth system that takes connections
and never answers (a listening socket nobody serves). Printed side by side:
1. `check --systems` over the three, and over the three and the silent one, beside `check` of one
   system: wall seconds (the issue's bound: 5 s) and their ratio.
2. The Streams page's first meaningful paint (its first stream's row) under `serve --systems` (the
   four) on one system, beside `serve` of that system alone: p50 and p95 over --runs fresh browser
   contexts, and the silent system's Streams page (it says the system is not reachable) beside them.
3. The collector's CPU per 1,000 tapped acks: `collect --systems` over the three, fast batches at flow
   10 on each, beside `collect` of one system taking the same batches: CPU-seconds per 1,000 acks and
   the ratio (the issue's bound: 1.1).
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nats
from nats.js.api import StreamConfig
from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import cpu_seconds, percentile, until  # noqa: E402
from console.broker.cluster import free_port  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")
CHROMIUM = "/usr/bin/chromium"
SYSTEMS = ("s1", "s2", "s3")


async def make_streams(url: str, count: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await asyncio.gather(*(js.add_stream(StreamConfig(name=f"B{i:05d}", subjects=[f"b{i:05d}.>"],
                                                      allow_atomic=i % 2 == 0, allow_batched=i % 2 == 1))
                           for i in range(count)))
    await js.add_stream(StreamConfig(name="FAST", subjects=["fast.>"], allow_batched=True))
    await nc.close()


def systems_file(path: Path, urls: dict[str, str]) -> Path:
    path.write_text("".join(f'[[system]]\nname = "{n}"\nservers = ["{u}"]\n\n' for n, u in urls.items()))
    return path


def timed_check(args: list[str], data: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([CLI, "check", *args, "--connect-timeout", "1", "--data-dir", str(data), "--format",
                           "json"], capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    assert done.returncode in (0, 1, 2, 3), done.stderr[-2000:]
    json.loads(done.stdout)
    return wall


async def paints(url: str, text: str, runs: int, exact: bool = True) -> list[float]:
    """Seconds from navigation to `text` on the page, in a fresh context each run (the first run warms)."""
    found = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM)
        for run in range(runs + 1):
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            page = await context.new_page()
            started = time.perf_counter()
            await page.goto(url, wait_until="commit")
            await page.get_by_text(text, exact=exact).first.wait_for(timeout=60_000)
            if run:
                found.append(time.perf_counter() - started)
            await context.close()
        await browser.close()
    return found


def serving(args: list[str], data: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([CLI, "serve", *args, "--connect-timeout", "1", "--port", str(port), "--data-dir",
                             str(data)], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    import urllib.request

    def up() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            return False

    deadline = time.monotonic() + 120
    while not up():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)
    return proc, url


async def fast_batches(url: str, messages: int) -> int:
    """Fast batches at flow 10 (an ack each 10 messages) until `messages` are sent: the acks sent."""
    nc = await nats.connect(url)
    acks = 0
    while messages > 0:
        n = min(messages, 5000)
        batch = FastBatch(nc, flow=10, max_outstanding_acks=2, inbox_prefix=f"_INBOX.{uuid.uuid4().hex}")
        for _ in range(n - 1):
            await batch.add("fast.x", b"x" * 128)
        await batch.commit("fast.x", b"x" * 128)
        acks += n // 10
        messages -= n
    await nc.close()
    return acks


async def collector_cpu(args: list[str], urls: list[str], data: Path, log: Path, messages: int) -> float:
    """CPU-seconds per 1,000 acks the collector tapped, `messages` sent on each of `urls`."""
    proc = subprocess.Popen([CLI, "collect", *args, "--data-dir", str(data)], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)
    try:
        for url in urls:
            nc = await nats.connect(url)
            js = nc.jetstream()

            async def ready() -> bool:
                try:
                    await js.consumer_info("BATCH_CONSOLE_ADVISORIES", "batch-console-collector")
                    return True
                except Exception:
                    return False
            await until(ready, 60, "the collector's consumer")
            await nc.close()
        await asyncio.sleep(2.0)  # its start's own work done
        before = cpu_seconds(proc.pid)
        acks = sum(await asyncio.gather(*(fast_batches(url, messages) for url in urls)))
        await asyncio.sleep(2.0)  # the last acks folded and written
        return (cpu_seconds(proc.pid) - before) / acks * 1000
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def line(name: str, one: float, fleet: float, unit: str) -> None:
    print(f"  {name:<44} {one:>9.3f} {fleet:>9.3f} {unit:<6} ratio {fleet / one:.2f}")


async def run(tmp: Path, streams: int, runs: int, messages: int) -> None:
    servers = {name: EmbeddedServer(tmp / name).start() for name in SYSTEMS}
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(100)  # connections wait in its backlog: nothing ever answers
    silent_url = f"nats://127.0.0.1:{silent.getsockname()[1]}"
    try:
        started = time.perf_counter()
        await asyncio.gather(*(make_streams(s.url, streams) for s in servers.values()))
        print(f"{len(SYSTEMS)} systems with {streams} streams each made in {time.perf_counter() - started:.1f} s")
        urls = {name: s.url for name, s in servers.items()}
        three = systems_file(tmp / "three.toml", urls)
        four = systems_file(tmp / "four.toml", {**urls, "silent": silent_url})

        print("\ncheck (wall seconds, median of --runs)          one system  systems")
        one = statistics.median(timed_check(["--server", urls["s1"]], tmp / "d-one") for _ in range(runs))
        fleet = statistics.median(timed_check(["--systems", str(three)], tmp / "d-three") for _ in range(runs))
        with_silent = statistics.median(timed_check(["--systems", str(four)], tmp / "d-four") for _ in range(runs))
        line("check --systems, three systems", one, fleet, "s")
        line("check --systems, three and a silent one", one, with_silent, "s")

        print("\nStreams page, first meaningful paint (s)       one system  systems")
        alone, alone_url = serving(["--server", urls["s2"]], tmp / "w-one", tmp / "serve-one.log")
        several, several_url = serving(["--systems", str(four)], tmp / "w-four", tmp / "serve-four.log")
        try:
            one_p = await paints(alone_url + "streams", "B00000", runs)
            fleet_p = await paints(several_url + "streams?system=s2", "B00000", runs)
            silent_p = await paints(several_url + "streams?system=silent", "is not reachable yet", runs, exact=False)
            line("p50", statistics.median(one_p), statistics.median(fleet_p), "s")
            line("p95", percentile(one_p, 95), percentile(fleet_p, 95), "s")
            print(f"  {'the silent system: its page says so, p50':<44} {statistics.median(silent_p):>19.3f} s")
        finally:
            for proc in (alone, several):
                proc.terminate()
                proc.wait(timeout=30)

        print("\ncollector CPU-seconds per 1,000 tapped acks   one system  systems")
        one_c = await collector_cpu(["--server", urls["s1"]], [urls["s1"]], tmp / "c-one", tmp / "collect-one.log",
                                    messages)
        fleet_c = await collector_cpu(["--systems", str(three)], list(urls.values()), tmp / "c-three",
                                      tmp / "collect-three.log", messages)
        line("per 1,000 acks", one_c, fleet_c, "cpu-s")
    finally:
        silent.close()
        for server in servers.values():
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=30_000, help="fast-ingest messages per system")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp), a.streams, a.runs, a.messages))


if __name__ == "__main__":
    main()
