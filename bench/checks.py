"""`batch-console check` over many streams: wall time, and the JetStream API requests it sends (the
server's own /jsz count), at 10 and at N streams side by side, so the ratio shows what grows with
the stream count. Target: one stream list (a page per 256 streams), one /varz, no request per stream.

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
import time
import urllib.request
from pathlib import Path

import nats
from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from console.broker.server import EmbeddedServer  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")


def api_requests(server: EmbeddedServer) -> int:
    with urllib.request.urlopen(f"{server.monitor_url}/jsz", timeout=5) as reply:
        return int(json.load(reply)["api"]["total"])


async def make_streams(url: str, first: int, last: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for i in range(first, last):
        await js.add_stream(StreamConfig(name=f"B{i:05d}", subjects=[f"b{i:05d}.>"], allow_atomic=i % 2 == 0,
                                         allow_batched=i % 2 == 1, metadata={"team": "bench"}))
    await nc.close()


def one_check(server: EmbeddedServer, data: Path) -> tuple[float, int]:
    before = api_requests(server)
    started = time.perf_counter()
    done = subprocess.run([CLI, "check", "--server", server.url, "--monitor-url", server.monitor_url, "--data-dir",
                           str(data), "--format", "json"], capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]
    return wall, api_requests(server) - before - 1  # the /jsz read itself is not an API request; kept honest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats", monitor_port=0) as server:
        rows = []
        made = 0
        for count in (10, args.streams):
            asyncio.run(make_streams(server.url, made, count))
            made = count
            runs = [one_check(server, Path(tmp)) for _ in range(args.runs)]
            rows.append((count, statistics.median(w for w, _ in runs), max(r for _, r in runs)))
        print(f"{'streams':>8} {'wall s (median)':>16} {'JS API requests':>16}")
        for count, wall, requests in rows:
            print(f"{count:>8} {wall:>16.2f} {requests:>16}")
        (small, w0, r0), (big, w1, r1) = rows
        print(f"{big // small}x the streams: {w1 / w0:.2f}x the wall time, {r1 - r0} more API requests "
              f"({(r1 - r0) / (big - small):.3f} per stream)")


if __name__ == "__main__":
    main()
