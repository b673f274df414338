"""`batch-console check` over many streams: wall time, and the JetStream API requests sent while it
runs (a subscriber on $JS.API.>, the collector's pulls left out, its look at each new stream let
finish before), at 10 and at N streams
side by side, so the difference shows what grows with the stream count. Target: one stream list (a
page per 256 streams), one /varz, no request per stream; under 5 s for 1,000 streams.

    .venv/bin/python bench/checks.py [--streams 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nats
from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from console.broker.server import EmbeddedServer  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")


class Requests:
    """Counts the JetStream API requests (and /varz asks through the system account) any client sends."""

    def __init__(self, url: str):
        self.url, self.seen, self.last = url, 0, time.monotonic()
        self.thread = threading.Thread(target=asyncio.run, args=(self._listen(),), daemon=True)
        self.ready = threading.Event()
        self.thread.start()
        self.ready.wait(10)

    async def _listen(self) -> None:
        async def quiet(_error) -> None:  # the server stops before this thread: nothing to say
            pass

        nc = await nats.connect(self.url, error_cb=quiet, max_reconnect_attempts=0)

        async def count(msg) -> None:
            if not msg.subject.startswith("$JS.API.CONSUMER.MSG.NEXT."):  # the collector's own pull, once a second
                self.seen += 1
                self.last = time.monotonic()

        await nc.subscribe("$JS.API.>", cb=count)
        await nc.flush()
        self.ready.set()
        await asyncio.Event().wait()


async def make_streams(url: str, first: int, last: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for i in range(first, last):
        await js.add_stream(StreamConfig(name=f"B{i:05d}", subjects=[f"b{i:05d}.>"], allow_atomic=i % 2 == 0,
                                         allow_batched=i % 2 == 1, metadata={"team": "bench"}))
    await nc.close()


def one_check(server: EmbeddedServer, data: Path, requests: Requests) -> tuple[float, int]:
    before = requests.seen
    started = time.perf_counter()
    done = subprocess.run([CLI, "check", "--server", server.url, "--monitor-url", server.monitor_url, "--data-dir",
                           str(data), "--format", "json"], capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    assert done.returncode in (0, 1, 2), done.stdout[-2000:] + done.stderr[-2000:]
    checked = json.loads(done.stdout)["checked"]
    assert {"BATCH_001", "BATCH_009"} <= set(checked), done.stdout[-2000:]  # the streams and the event log read
    time.sleep(0.2)  # the last requests reach the counter
    return wall, requests.seen - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats", monitor_port=0) as server:
        collector = subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", tmp],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the event log and its key
        time.sleep(3)
        counter = Requests(server.url)
        rows = []
        made = 0
        for count in (10, args.streams):
            asyncio.run(make_streams(server.url, made, count))
            made = count
            while time.monotonic() - counter.last < 2:  # the collector looks at each new stream once: let it
                time.sleep(0.2)
            runs = [one_check(server, Path(tmp), counter) for _ in range(args.runs)]
            rows.append((count, statistics.median(w for w, _ in runs), max(r for _, r in runs)))
        print(f"{'streams':>8} {'wall s (median)':>16} {'JS API requests':>16}")
        for count, wall, requests in rows:
            print(f"{count:>8} {wall:>16.2f} {requests:>16}")
        (small, w0, r0), (big, w1, r1) = rows
        collector.terminate()
        print(f"{big // small}x the streams: {w1 / w0:.2f}x the wall time, {r1 - r0} more API requests "
              f"({(r1 - r0) / (big - small):.3f} per stream)")


if __name__ == "__main__":
    main()
