"""From an abandoned batch to its row in the browser, next to a bare nats-py subscriber, in one run.

    .venv/bin/python bench/ui.py [--abandonments 200] [--rate 20] [--load-seconds 15]

Starts an embedded nats-server (1 s batch timeout), `batch-console collect`, `batch-console serve`
and Debian's Chromium on the Live page. Then:
1. Atomic batches staged and left to time out, `--rate` a second: for each, the delay from the
   server's advisory timestamp to (a) a bare nats-py subscriber receiving the advisory and (b) the
   batch id appearing in the page's DOM (a poller in the page, every 25 ms, through Bokeh's shadow
   roots). p50 and p95 of each, and the ratio.
2. A fast-ingest publisher at flow 10, full speed, tapped by the collector for `--load-seconds`,
   with one abandonment a second: whether the page keeps showing them, and the web process's CPU
   (cores used, from /proc) over that window.
3. First paint of Live with 10,000 recent lost batches in the event log's last hour (200 streams,
   50 each: what the live model keeps): from the page's request to the first lost batch's row,
   median of 5, for this checkout and for `--before` (default: the commit before the frame),
   each a `serve` of its own on the same event log.
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nats
from nats.js.api import StorageType, StreamConfig
from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import cpu_seconds, percentile  # noqa: E402
from console.broker.atomic import AtomicBatch  # noqa: E402
from console.broker.cluster import free_port  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import BatchLimits, EmbeddedServer  # noqa: E402
from console.broker.eventlog import EventLog  # noqa: E402
from console.config import EventLogSettings  # noqa: E402
from console.domain.advisories import to_batch_abandoned  # noqa: E402
from console.domain.events import BatchEvent, EventKind  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")
CHROMIUM = "/usr/bin/chromium"
ID_PREFIX = "uibench"
BEFORE = "63d3b03"  # the last commit whose Live page had no frame
ROOT = Path(__file__).resolve().parents[1]

# Records when each batch id first shows anywhere in the page, shadow roots included.
DOM_POLLER = """
(prefix) => {
  window.__seen = {};
  const pattern = new RegExp(prefix + "-\\\\d{6}", "g");
  const text = (root) => {
    let all = root.textContent || "";
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) all += " " + text(el.shadowRoot);
    return all;
  };
  setInterval(() => {
    const now = Date.now();
    for (const id of text(document).match(pattern) || []) if (!(id in window.__seen)) window.__seen[id] = now;
  }, 25);
}
"""




async def abandon(nc, batch_id: str) -> None:
    """Stage one message and leave the batch: the server abandons it at its timeout."""
    await AtomicBatch(nc, batch_id=batch_id).add("uibench.x", b"1")


class Arrivals:
    """The server's advisory timestamp and a bare subscriber's receive time, per batch id."""

    def __init__(self):
        self.advised: dict[str, float] = {}
        self.received: dict[str, float] = {}

    async def on_advisory(self, msg) -> None:
        now = time.time()
        advisory = to_batch_abandoned(msg.data)
        if advisory.batch.startswith(ID_PREFIX):
            self.advised[advisory.batch] = advisory.timestamp.timestamp()
            self.received[advisory.batch] = now


async def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def seen_in_page(page) -> dict[str, float]:
    return {k: v / 1000 for k, v in (await page.evaluate("window.__seen")).items()}


async def run(args, server: EmbeddedServer, tmp: Path) -> None:
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="UIBENCH", subjects=["uibench.>"], allow_atomic=True))
    await js.add_stream(StreamConfig(name="UIFAST", subjects=["uifast.x"], storage=StorageType.FILE, allow_batched=True))
    arrivals = Arrivals()
    await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", cb=arrivals.on_advisory)

    port = server.port + 1000
    keyed = ["--server", server.url, "--data-dir", str(tmp)]  # one data dir: one event key
    procs = [subprocess.Popen([CLI, "collect", *keyed], stderr=open(tmp / "collector.log", "w")),
             subprocess.Popen([CLI, "serve", *keyed, "--port", str(port)],
                              stdout=open(tmp / "web.log", "w"), stderr=subprocess.STDOUT)]
    web = procs[1]
    try:
        await measure(args, nc, arrivals, web, port)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        await nc.close()


async def measure(args, nc, arrivals: Arrivals, web: subprocess.Popen, port: int) -> None:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                           "--disable-dev-shm-usage"])
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        for _ in range(600):
            try:
                await page.goto(f"http://127.0.0.1:{port}/")
                break
            except Exception:
                await asyncio.sleep(0.1)
        await page.get_by_text("collector alive", exact=True).first.wait_for(timeout=60_000)
        await page.evaluate(DOM_POLLER, ID_PREFIX)

        ids = [f"{ID_PREFIX}-{i:06d}" for i in range(args.abandonments)]
        print(f"  {len(ids)} abandonments at {args.rate}/s …", file=sys.stderr)
        for batch_id in ids:
            await abandon(nc, batch_id)
            await asyncio.sleep(1 / args.rate)

        async def all_seen():
            return len(await seen_in_page(page)) >= len(ids) and len(arrivals.received) >= len(ids)
        await wait_for(all_seen, 60)
        dom = await seen_in_page(page)
        bare_delay = [arrivals.received[i] - arrivals.advised[i] for i in ids if i in arrivals.received]
        dom_delay = [dom[i] - arrivals.advised[i] for i in ids if i in dom and i in arrivals.advised]

        load_ids = [f"{ID_PREFIX}-{900000 + i:06d}" for i in range(int(args.load_seconds))]
        print(f"  fast publisher at full speed for {args.load_seconds:.0f} s …", file=sys.stderr)
        stop = asyncio.Event()

        async def publish_fast() -> int:
            sent = 0
            while not stop.is_set():
                batch = FastBatch(nc, flow=10, max_outstanding_acks=2)
                for _ in range(20_000):
                    await batch.add("uifast.x", b"x" * 128)
                sent += (await batch.commit("uifast.x", b"x" * 128)).count
            return sent

        publisher = asyncio.create_task(publish_fast())
        cpu0, wall0 = cpu_seconds(web.pid), time.monotonic()
        for batch_id in load_ids:
            await abandon(nc, batch_id)
            await asyncio.sleep(1)
        cpu1, wall1 = cpu_seconds(web.pid), time.monotonic()
        stop.set()
        sent = await publisher

        async def load_seen():
            seen = await seen_in_page(page)
            return all(i in seen for i in load_ids)
        await wait_for(load_seen, 30)
        dom = await seen_in_page(page)
        load_delay = [dom[i] - arrivals.advised[i] for i in load_ids if i in dom and i in arrivals.advised]
        await browser.close()

    print(f"{'':34}{'p50 s':>8}{'p95 s':>8}{'seen':>10}")
    print(f"{'bare nats-py subscriber':34}{percentile(bare_delay, .5):8.3f}{percentile(bare_delay, .95):8.3f}"
          f"{len(bare_delay):>6}/{len(ids)}")
    print(f"{'row in the browser DOM':34}{percentile(dom_delay, .5):8.3f}{percentile(dom_delay, .95):8.3f}"
          f"{len(dom_delay):>6}/{len(ids)}")
    if load_delay:
        print(f"{'DOM, under a full-speed tap':34}{percentile(load_delay, .5):8.3f}{percentile(load_delay, .95):8.3f}"
              f"{len(load_delay):>6}/{len(load_ids)}")
    print(f"DOM p95 minus subscriber p95: {percentile(dom_delay, .95) - percentile(bare_delay, .95):.3f} s "
          f"(target: DOM p95 < 1 s)")
    print(f"web process CPU under load: {(cpu1 - cpu0) / (wall1 - wall0):.2f} cores "
          f"(publisher sent {sent:,} msgs, {sent / (wall1 - wall0):,.0f}/s; target < 1 core)")


async def fill_log(server_url: str, data_dir: Path, losses: int) -> None:
    nc = await nats.connect(server_url)
    log = EventLog(nc.jetstream(), EventLogSettings().keyed(data_dir))
    await log.ensure()
    now = datetime.now(timezone.utc)
    events = [BatchEvent(f"paint.{i}", EventKind.ATOMIC_ABANDONED, now - timedelta(seconds=losses - i) / 5,
                         f"PAINT_{i % 200:03d}", f"paint-{i:06d}", reason="timeout") for i in range(losses)]
    for start in range(0, losses, 1000):
        result = await log.append(events[start:start + 1000])
        assert not result.retry and not result.refused, result
    await nc.close()


async def first_paint(server_url: str, data_dir: Path, code: Path, runs: int = 5) -> list[float]:
    """Seconds from asking for Live to the first lost batch's row, for the console in `code`."""
    port = free_port()
    launch = f"import sys; sys.path.insert(0, {str(code)!r}); from console.cli import main; sys.exit(main())"
    web = subprocess.Popen([sys.executable, "-c", launch, "serve", "--server", server_url, "--data-dir", str(data_dir),
                            "--port", str(port)], stdout=open(data_dir / f"web-{code.name}.log", "w"),
                           stderr=subprocess.STDOUT, cwd=code)
    times = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            for run in range(runs + 1):  # the first warms the process (its backfill), and is not counted
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                started = time.monotonic()
                while True:
                    try:
                        await page.goto(f"http://127.0.0.1:{port}/")
                        break
                    except Exception:
                        await asyncio.sleep(0.1)
                        started = time.monotonic()
                await page.get_by_role("row").filter(has_text="paint-").first.wait_for(timeout=120_000)
                if run:
                    times.append(time.monotonic() - started)
                await page.close()
            await browser.close()
    finally:
        web.terminate()
        web.wait(timeout=20)
    return times


def paint_section(server: EmbeddedServer, tmp: Path, before: str) -> None:
    old = tmp / "before"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", before], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    data = tmp / "paint"
    data.mkdir()
    asyncio.run(fill_log(server.url, data, 10_000))
    print(f"  first paint of Live with 10,000 lost batches: this checkout, then {before} …", file=sys.stderr)
    now, then = asyncio.run(first_paint(server.url, data, ROOT)), asyncio.run(first_paint(server.url, data, old))
    a, b = statistics.median(now), statistics.median(then)
    print(f"first paint of Live, 10,000 lost batches (median of {len(now)}): this checkout {a:.2f} s, "
          f"{before} (no frame) {b:.2f} s, ratio {a / b:.2f} (target < 1.5 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--abandonments", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20, help="abandonments per second")
    parser.add_argument("--load-seconds", type=float, default=15)
    parser.add_argument("--before", default=BEFORE, help="the commit whose Live page the first paint is set beside")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with EmbeddedServer(Path(tmp) / "nats", batch_limits=BatchLimits(timeout=1.0)) as server:
            asyncio.run(run(args, server, Path(tmp)))
            paint_section(server, Path(tmp), args.before)


if __name__ == "__main__":
    main()
