"""How fast the console tells someone, side by side in one run against one embedded nats-server.

    .venv/bin/python bench/alerts.py [--samples 200] [--streams 1000]

1. From an abandonment (an atomic batch refused with a gap) to the webhook request arriving at a
   receiver, through `batch-console collect` and `batch-console alerts` (each its own process), next
   to a bare nats-py subscriber of the advisories: p50 and p95 of each (target p95 < 1 s). Each
   sample is on a stream of its own, so each fires its rule.
2. A Prometheus scrape of `/metrics` with --streams streams' labels (every kind of loss on each):
   the median and p95 of 20 scrapes (target < 50 ms).

A benchmark, not a test: read the figures next to each other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import nats
from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import percentile, until  # noqa: E402
from console.alerting.metrics import Metrics, serve_metrics  # noqa: E402
from console.broker.atomic import AtomicBatch  # noqa: E402
from console.broker.server import BatchLimits, EmbeddedServer  # noqa: E402
from console.domain.events import BatchEvent, EventKind  # noqa: E402
from console.errors import BatchError  # noqa: E402
from console.progress import ProgressBar  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")


class Receiver:
    def __init__(self):
        self.arrived: dict[str, float] = {}  # stream -> when its firing notice arrived
        arrived = self.arrived

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body["status"] == "firing":
                    arrived.setdefault(body["stream"], time.perf_counter())
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def part(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([CLI, *args], stdout=open(log, "w"), stderr=subprocess.STDOUT)


async def to_webhook(server: EmbeddedServer, tmp: Path, samples: int) -> None:
    receiver = Receiver()
    rules = tmp / "rules.toml"
    rules.write_text('[[rule]]\nname = "abandoned"\nwhen = "lost_batches"\nstreams = ["ALR*"]\nwithin = "5m"\n'
                     f'notify = ["webhook:http://127.0.0.1:{receiver.server.server_port}/hook"]\n')
    common = ["--server", server.url, "--data-dir", str(tmp)]
    collector = part(["collect", *common, "--cpu", "normal"], tmp / "collector.log")
    alerts = part(["alerts", *common, "--rules", str(rules)], tmp / "alerts.log")
    nc = await nats.connect(server.url)
    bare_seen: dict[str, float] = {}

    async def on_advisory(msg):
        bare_seen.setdefault(msg.subject.rsplit(".", 1)[-1], time.perf_counter())
    await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.*", cb=on_advisory)
    try:
        await until(lambda: "collecting into" in (tmp / "collector.log").read_text(), 60, "the collector did not start")
        js = nc.jetstream()
        streams = [f"ALR{i}" for i in range(samples)]
        for name in streams:
            await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], allow_atomic=True))
        await until(lambda: "following the event log live" in (tmp / "alerts.log").read_text(), 60, "alerts not live")
        sent: dict[str, float] = {}
        bar = ProgressBar(samples, "abandonments")
        for i, name in enumerate(streams):
            batch = AtomicBatch(nc)
            await batch.add(f"{name.lower()}.x", b"1")
            batch.skip_seq()
            sent[name] = time.perf_counter()
            try:
                await batch.commit(f"{name.lower()}.x", b"3")
            except BatchError:
                pass
            await until(lambda: name in receiver.arrived and name in bare_seen, 30, f"no notice for {name}", every=0.01)
            bar.update(i + 1)
        bar.close()
    finally:
        await nc.close()
        for proc in (alerts, collector):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        receiver.server.shutdown()
    bare = [1000 * (bare_seen[s] - t) for s, t in sent.items()]
    hook = [1000 * (receiver.arrived[s] - t) for s, t in sent.items()]
    print(f"\n1. From an abandonment to the notice, {samples} samples (ms from the refused commit's send)")
    print(f"{'':40}{'p50':>10}{'p95':>10}")
    print(f"{'  bare subscriber has the advisory':40}{percentile(bare, 0.5):>10.1f}{percentile(bare, 0.95):>10.1f}")
    print(f"{'  webhook request arrives':40}{percentile(hook, 0.5):>10.1f}{percentile(hook, 0.95):>10.1f}"
          f"   (target p95 < 1000)")


def scrape(streams: int) -> None:
    metrics = Metrics()
    now = datetime.now(timezone.utc)
    kinds = [(EventKind.ATOMIC_ABANDONED, r) for r in ("timeout", "incomplete", "large", "unsupported")] + \
        [(EventKind.FAST_ENDED_EARLY, "gap"), (EventKind.FAST_DROPPED, None), (EventKind.FAST_LOST, "leader_change")]
    for i in range(streams):
        for n, (kind, reason) in enumerate(kinds):
            metrics.observe(BatchEvent(f"{i}.{n}", kind, now, f"S{i}", f"b{i}.{n}", reason=reason))
        metrics.observe(BatchEvent(f"{i}.g", EventKind.FAST_GAP, now, f"S{i}", f"g{i}", gap_mode="ok", lost=3, seq=5,
                                   first_lost_seq=2))
        metrics.observe(BatchEvent(f"{i}.c", EventKind.FAST_COMMITTED, now, f"S{i}", f"c{i}", count=10))
        metrics.observe(BatchEvent(f"{i}.r", EventKind.FAST_REJECTED, now, f"S{i}", f"r{i}", err_code=10211))
    server = serve_metrics(metrics, 0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    times, size = [], 0
    for _ in range(21):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as reply:
            size = len(reply.read())
        times.append(1000 * (time.perf_counter() - started))
    times = times[1:]  # the first warms up
    server.shutdown()
    print(f"\n2. A Prometheus scrape with {streams:,} streams' labels ({size / 1024:,.0f} KiB)")
    print(f"  median {percentile(times, 0.5):.1f} ms, p95 {percentile(times, 0.95):.1f} ms   (target < 50 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats", batch_limits=BatchLimits()) as server:
        asyncio.run(to_webhook(server, Path(tmp), args.samples))
    scrape(args.streams)


if __name__ == "__main__":
    main()
