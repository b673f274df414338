"""The API under load beside the pages, in one run: 50 clients polling GET /api/v1/losses every second.

    .venv/bin/python bench/api_load.py [--clients 50] [--seconds 300] [--quiet-seconds 30]

Starts an embedded nats-server (1 s batch timeout), `batch-console collect`, `batch-console serve`,
a viewer's token and Debian's Chromium on the Live page, with 200 losses already on Live. Then one
abandonment a second throughout, first with no API load (`--quiet-seconds`), then with `--clients`
pollers (`--seconds`). Printed side by side: the API's answer times (p50, p95, p99; target p95 <=
200 ms), the delay from the server's advisory to the row in the browser without and with the load
(their ratio), and the web process's memory at the load's start, middle and end (flat: the ratio of
end to middle). A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import nats
from nats.js.api import StreamConfig
from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import percentile, until  # noqa: E402
from ui import CHROMIUM, CLI, DOM_POLLER, ID_PREFIX, Arrivals, abandon, seen_in_page  # noqa: E402
from console.broker.cluster import free_port  # noqa: E402
from console.broker.server import BatchLimits, EmbeddedServer  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def abandon_every_second(nc, first: int, seconds: float) -> list[str]:
    ids, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        batch_id = f"{ID_PREFIX}-{first + len(ids):06d}"  # as the page's poller looks for them
        await abandon(nc, batch_id)
        ids.append(batch_id)
        await asyncio.sleep(1)
    return ids


async def poller(client: httpx.AsyncClient, stop: asyncio.Event, answers: list[float], errors: list[int]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        answer = await client.get("/losses", params={"limit": 100})
        answers.append(time.perf_counter() - started)
        if answer.status_code != 200:
            errors.append(answer.status_code)
        await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))


async def run(args, server: EmbeddedServer, tmp: Path) -> None:
    nc = await nats.connect(server.url)
    await nc.jetstream().add_stream(StreamConfig(name="UIBENCH", subjects=["uibench.>"], allow_atomic=True))
    arrivals = Arrivals()
    await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", cb=arrivals.on_advisory)
    keyed = ["--server", server.url, "--data-dir", str(tmp)]
    token = subprocess.run([CLI, "token", "create", "--name", "load", "--role", "viewer", "--rate", "1000",
                            "--data-dir", str(tmp)], capture_output=True, text=True, check=True).stdout.split()[-1]
    port = free_port()
    procs = [subprocess.Popen([CLI, "collect", *keyed], stderr=open(tmp / "collector.log", "w")),
             subprocess.Popen([CLI, "serve", *keyed, "--port", str(port)], stdout=open(tmp / "web.log", "w"),
                              stderr=subprocess.STDOUT)]
    web = procs[1]
    try:
        for round_ in range(40):  # 200 losses on Live before anything is measured, 5 at a time (the server's limit)
            for i in range(5):
                await abandon(nc, f"seed-{round_:02d}-{i}")
            await asyncio.sleep(1.2)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await until(lambda: _answers(f"http://127.0.0.1:{port}/"), 60, "the web console")
            await page.goto(f"http://127.0.0.1:{port}/")
            await page.get_by_text("collector alive", exact=True).first.wait_for(timeout=60_000)
            await page.evaluate(DOM_POLLER, ID_PREFIX)
            print(f"  {args.quiet_seconds:.0f} s without the API's load …", file=sys.stderr)
            quiet = await abandon_every_second(nc, 100_000, args.quiet_seconds)
            stop, answers, errors, memory = asyncio.Event(), [], [], []
            headers = {"Authorization": f"Bearer {token}"}
            clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/api/v1", headers=headers, timeout=30)
                       for _ in range(args.clients)]
            print(f"  {args.clients} clients polling /losses every second for {args.seconds:.0f} s …", file=sys.stderr)
            pollers = [asyncio.create_task(poller(c, stop, answers, errors)) for c in clients]

            async def sample_memory() -> None:
                while not stop.is_set():
                    memory.append(rss_mib(web.pid))
                    await asyncio.sleep(5)

            sampler = asyncio.create_task(sample_memory())
            loaded = await abandon_every_second(nc, 200_000, args.seconds)
            stop.set()
            await asyncio.gather(*pollers, sampler)
            for client in clients:
                await client.aclose()
            await until(lambda: _all_seen(page, quiet + loaded), 60, "every abandonment on Live")
            seen = await seen_in_page(page)
            await browser.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        await nc.close()

    def delays(ids: list[str]) -> list[float]:
        return [seen[i] - arrivals.advised[i] for i in ids if i in seen and i in arrivals.advised]

    quiet_d, loaded_d = delays(quiet), delays(loaded)
    print(f"{'':40}{'p50':>9}{'p95':>9}{'p99':>9}")
    print(f"{'API GET /losses answer (ms)':40}{percentile(answers, .5) * 1e3:9.1f}{percentile(answers, .95) * 1e3:9.1f}"
          f"{percentile(answers, .99) * 1e3:9.1f}   {len(answers):,} calls, {len(errors)} not 200")
    print(f"{'Live row, no API load (s)':40}{percentile(quiet_d, .5):9.3f}{percentile(quiet_d, .95):9.3f}"
          f"{'':9}   {len(quiet_d)}/{len(quiet)} seen")
    print(f"{'Live row, under the API load (s)':40}{percentile(loaded_d, .5):9.3f}{percentile(loaded_d, .95):9.3f}"
          f"{'':9}   {len(loaded_d)}/{len(loaded)} seen")
    print(f"Live p95 under load / without: {percentile(loaded_d, .95) / percentile(quiet_d, .95):.2f}")
    middle = memory[len(memory) // 2]
    print(f"web memory (MiB) at the load's start, middle, end: {memory[0]:.0f}, {middle:.0f}, {memory[-1]:.0f} "
          f"(end / middle: {memory[-1] / middle:.2f})")


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def _all_seen(page, ids: list[str]) -> bool:
    seen = await seen_in_page(page)
    return all(i in seen for i in ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--quiet-seconds", type=float, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with EmbeddedServer(Path(tmp) / "nats", batch_limits=BatchLimits(timeout=1.0)) as server:
            asyncio.run(run(args, server, Path(tmp)))


if __name__ == "__main__":
    main()
