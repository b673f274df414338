"""First meaningful paint of every page, this checkout beside an older one, in one run.

    .venv/bin/python bench/paint.py [--before 8c8b3c1] [--runs 5]

An embedded nats-server holds an event log with a week of history (analytics run once over it, so
History has its SQLite tables) and 10,000 lost batches in the last hour (200 streams, 50 each). For
each checkout, `serve` on that data directory; each page is opened once to warm the process, then
`--runs` times in a fresh browser context (cold: no cache, a new Bokeh session each time), timed from
the navigation to the page's first meaningful content (Live: a lost batch's row; Incident: the
batch; History: its summary; Streams and the stream page: the event log stream; Alerts: a rule;
Probe, Replay and Search: their form; Audit: the chain's state; Conformance: the
clients graded), whether it came from the server's first answer (console.ui.preview)
or from the live Panel page; and then to the live page drawn (the preview replaced). p50 and p95 of
each, side by side. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nats
from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import percentile  # noqa: E402
from console.broker.cluster import free_port  # noqa: E402
from console.broker.eventlog import EventLog  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.config import EventLogSettings  # noqa: E402
from console.domain.events import BatchEvent, EventKind  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "batch-console")
CHROMIUM = "/usr/bin/chromium"
NEWEST = "paint-009999"
# Each page and what shows it has its first meaningful content (present in both checkouts).
PAGES = {
    "live": ("", lambda p: p.get_by_role("row").filter(has_text="paint-").first),
    "incident": (f"incident?batch={NEWEST}", lambda p: p.get_by_text(NEWEST).first),
    "history": ("history", lambda p: p.get_by_text(re.compile(r"[\d,]+ abandoned batches")).first),
    "streams": ("streams", lambda p: p.get_by_text("BATCH_CONSOLE_EVENTS").first),
    "stream": ("stream?name=BATCH_CONSOLE_EVENTS", lambda p: p.get_by_text("Stream BATCH_CONSOLE_EVENTS").first),
    "alerts": ("alerts", lambda p: p.get_by_text("atomic batch timed out").first),
    # a form: its button, the server's disabled copy or the live one (CSS: the copy is hidden from role queries)
    "probe": ("probe", lambda p: p.locator("button", has_text="Publish probe").first),
    "replay": ("replay?stream=BATCH_CONSOLE_EVENTS", lambda p: p.locator("button", has_text="Fetch").first),
    "search": ("search", lambda p: p.locator("button", has_text="Search").first),
    "audit": ("audit", lambda p: p.get_by_text(re.compile(r"Chain intact|CHAIN BROKEN|not read")).first),
    "conformance": ("conformance", lambda p: p.get_by_text(re.compile(r"graded|No verdicts yet")).first),
}


def week_and_hour(now: datetime) -> list[BatchEvent]:
    """A week of losses (one every ~2 minutes) and 10,000 in the last hour."""
    events = []
    for i in range(5_000):
        t = now - timedelta(days=7) + timedelta(seconds=i * 120)
        if i % 2:
            events.append(BatchEvent(f"week.{i}", EventKind.ATOMIC_ABANDONED, t, f"WEEK_{i % 20:02d}",
                                     f"week-{i:06d}", reason="timeout"))
        else:
            events.append(BatchEvent(f"week.{i}", EventKind.FAST_ENDED_EARLY, t, f"WEEK_{i % 20:02d}",
                                     f"week-{i:06d}", gap_mode="fail", reason="gap", count=10))
    events += [BatchEvent(f"paint.{i}", EventKind.ATOMIC_ABANDONED, now - timedelta(seconds=(10_000 - i) / 5),
                          f"PAINT_{i % 200:03d}", f"paint-{i:06d}", reason="timeout") for i in range(10_000)]
    return events


async def fill(url: str, data_dir: Path) -> None:
    nc = await nats.connect(url)
    log = EventLog(nc.jetstream(), EventLogSettings().keyed(data_dir))
    await log.ensure()
    events = week_and_hour(datetime.now(timezone.utc))
    for start in range(0, len(events), 1000):
        result = await log.append(events[start:start + 1000])
        assert not result.retry and not result.refused, result
    await nc.close()


async def paints(url: str, data_dir: Path, code: Path, runs: int) -> dict[str, list[float]]:
    port = free_port()
    launch = f"import sys; sys.path.insert(0, {str(code)!r}); from console.cli import main; sys.exit(main())"
    web = subprocess.Popen([sys.executable, "-c", launch, "serve", "--server", url, "--data-dir", str(data_dir),
                            "--port", str(port)], stdout=open(data_dir / f"web-{code.name}.log", "w"),
                           stderr=subprocess.STDOUT, cwd=code)
    found: dict[str, list[float]] = {}
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            for name, (path, content) in PAGES.items():
                times, drawn = [], []
                for run in range(runs + 1):  # the first warms the process for this page, and is not counted
                    context = await browser.new_context(viewport={"width": 1280, "height": 800})
                    page = await context.new_page()
                    while True:
                        started = time.monotonic()
                        try:
                            await page.goto(f"http://127.0.0.1:{port}/{path}", wait_until="commit")
                            break
                        except Exception:
                            await asyncio.sleep(0.2)  # the process is still starting
                    await content(page).wait_for(state="visible", timeout=120_000)
                    painted = time.monotonic() - started
                    # the live page drawn: the server's preview gone (a checkout without one draws it at once)
                    await page.locator("#bc-preview").wait_for(state="detached", timeout=120_000)
                    await content(page).wait_for(state="visible", timeout=120_000)
                    if run:
                        times.append(painted)
                        drawn.append(time.monotonic() - started)
                    await context.close()
                found[name], found[name + " drawn"] = times, drawn
                print(f"  {code.name}: {name} p50 {statistics.median(times):.2f} s, drawn {statistics.median(drawn):.2f} s",
                      file=sys.stderr)
            await browser.close()
    finally:
        web.terminate()
        web.wait(timeout=20)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="8c8b3c1", help="the commit set beside this checkout")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        old = tmp / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        data = tmp / "data"
        data.mkdir()
        with EmbeddedServer(tmp / "nats") as server:
            print("  filling the event log (a week, 10,000 in the last hour), analytics once …", file=sys.stderr)
            asyncio.run(fill(server.url, data))
            subprocess.run([CLI, "analytics", "--once", "--server", server.url, "--data-dir", str(data)],
                           check=True, stdout=subprocess.DEVNULL)
            now = asyncio.run(paints(server.url, data, ROOT, args.runs))
            then = asyncio.run(paints(server.url, data, old, args.runs))
    print(f"first meaningful paint, {args.runs} cold navigations each (s): this checkout | {args.before}")
    print(f"{'page':<16}{'p50':>7}{'p95':>7}   |{'p50':>7}{'p95':>7}   ratio p50")
    print("(meaningful: the content is on screen, from the server's preview where there is one; drawn: the live "
          "Panel page has replaced the preview)")
    for name in [n for page in PAGES for n in (page, page + " drawn")]:
        a, b = now[name], then[name]
        print(f"{name:<16}{statistics.median(a):>7.2f}{percentile(a, 0.95):>7.2f}   |"
              f"{statistics.median(b):>7.2f}{percentile(b, 0.95):>7.2f}   {statistics.median(a) / statistics.median(b):.2f}")


if __name__ == "__main__":
    main()
