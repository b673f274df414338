"""A system away from the console (its link cut while it goes on serving its own clients): the other
system's losses meanwhile are on Live at once, the away system is said, and its own losses from the
time it was away are on Live once it is back (durable capture, as for one system)."""

from __future__ import annotations

import re
import subprocess
import time

import nats
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import Link, abandon, run_apart, systems_text
from tests.processes import CLI, free_port, wait_http
from tests.waits import collector_ready

AWAY_FOR = 15.0  # seconds the link stays cut, at least (a nats-py client retries every 0.5 s: many tries)


async def _ready(urls: list[str], collector) -> None:
    for url in urls:
        nc = await nats.connect(url)
        await collector_ready(nc.jetstream(), collector)
        await nc.close()


async def _abandon(url: str, stream: str, batch_id: str) -> None:
    nc = await nats.connect(url)  # the system's own client, beside it: the link is the console's only
    await abandon(nc, stream, batch_id)
    await nc.close()


def test_a_system_away_delays_no_other_and_its_losses_come_once_it_is_back(tmp_path, page):
    with EmbeddedServer(tmp_path / "near", batch_limits=TEST_LIMITS) as near, \
            EmbeddedServer(tmp_path / "far", batch_limits=TEST_LIMITS) as far:
        link = Link(far.port)
        systems, data = tmp_path / "systems.toml", tmp_path / "data"
        systems.write_text(systems_text(near=near.url, far=link.url))
        common = ["--systems", str(systems), "--connect-timeout", "1", "--data-dir", str(data)]
        port = free_port()
        started = []
        for name, args in (("collector", ["collect", "--batch-timeout", "1"]), ("web", ["serve", "--port", str(port)])):
            with open(tmp_path / f"{name}.log", "w") as log:
                started.append(subprocess.Popen([CLI, *args, *common], stdout=log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}/"
        try:
            wait_http(url, started[1], tmp_path / "web.log")
            run_apart(_ready([near.url, far.url], started[0]))
            page.goto(url)
            rows = page.get_by_role("row")
            far_connected = page.get_by_text(re.compile("^far: connected"))  # its collector beside it
            expect(far_connected).to_be_visible(timeout=30_000)

            link.cut()
            cut_at = time.monotonic()
            expect(far_connected).to_have_count(0, timeout=30_000)  # said
            run_apart(_abandon(far.url, "AWAY_FAR", "away-far"))
            run_apart(_abandon(near.url, "AWAY_NEAR", "away-near"))
            expect(rows.filter(has_text="away-near")).to_have_count(1, timeout=30_000)  # at once, the other away
            expect(rows.filter(has_text="away-far")).to_have_count(0)
            page.wait_for_timeout(max(0.0, AWAY_FOR - (time.monotonic() - cut_at)) * 1000)  # the scenario: away a while
            expect(rows.filter(has_text="away-far")).to_have_count(0)

            link.mend()
            expect(rows.filter(has_text="away-far")).to_have_count(1, timeout=60_000)  # back: its loss, once
            expect(rows.filter(has_text="away-far").get_by_role("gridcell").nth(1)).to_have_text("far")
            expect(rows.filter(has_text="away-near")).to_have_count(1)
        finally:
            for proc in started:
                proc.terminate()
                proc.wait(timeout=90)  # a fleet's collectors run at nice 10: a loaded machine starves their exit
