"""`serve --systems FILE`: one web console over several NATS systems. Live shows every system's losses
with their system, and each system's alone when the URL names it; a system that is not reachable is
said on every page and delays none; a page on one system acts on it alone, each button naming it."""

from __future__ import annotations

import re
import subprocess
from urllib.parse import quote

import nats
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon, run_apart, systems_text
from tests.processes import CLI, free_port, wait_http
from tests.waits import collector_ready

HOSTILE_SYSTEMS = ["nope", "x" * 5000, "eu\n", "eu\x00", "../eu", "<script>alert(1)</script>", "EU", " eu"]


async def _losses_and_a_shared_stream(servers: dict[str, EmbeddedServer], collector) -> None:
    for name, server in servers.items():
        nc = await nats.connect(server.url)
        await collector_ready(nc.jetstream(), collector)
        await abandon(nc, f"FLEET_{name.upper()}", f"fleet-{name}")
        await nc.jetstream().add_stream(name="SHARED", subjects=["shared"], allow_atomic=True, allow_batched=True)
        await nc.close()


async def _batched(url: str) -> bool:
    nc = await nats.connect(url)
    try:
        return bool((await nc.jetstream().stream_info("SHARED")).config.allow_batched)  # false is left out
    finally:
        await nc.close()


def test_one_console_over_several_systems(tmp_path, page):
    with EmbeddedServer(tmp_path / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp_path / "us", batch_limits=TEST_LIMITS) as us:
        systems, data = tmp_path / "systems.toml", tmp_path / "data"
        systems.write_text(systems_text(eu=eu.url, us=us.url, gone=f"nats://127.0.0.1:{free_port()}"))
        logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("collector", "web")}
        collector = subprocess.Popen([CLI, "collect", "--systems", str(systems), "--batch-timeout", "1",
                                      "--connect-timeout", "1", "--data-dir", str(data)],
                                     stdout=logs["collector"], stderr=subprocess.STDOUT)
        port = free_port()
        web = subprocess.Popen([CLI, "serve", "--systems", str(systems), "--connect-timeout", "1", "--port", str(port),
                                "--data-dir", str(data)], stdout=logs["web"], stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/"
        try:
            wait_http(url, web, tmp_path / "web.log")  # an unreachable system held nothing up
            run_apart(_losses_and_a_shared_stream({"eu": eu, "us": us}, collector))

            page.goto(url)  # every system: each loss once, with its system
            rows = page.get_by_role("row")
            for name in ("eu", "us"):
                expect(rows.filter(has_text=f"fleet-{name}")).to_have_count(1, timeout=60_000)
                expect(rows.filter(has_text=f"fleet-{name}").get_by_role("gridcell").nth(1)).to_have_text(name)
            expect(page.get_by_role("alert").filter(has_text="system gone is not reachable")).to_be_visible()
            expect(page.get_by_role("navigation", name="systems").get_by_role("link", name="All systems")) \
                .to_have_attribute("aria-current", "true")
            expect(page.get_by_text(re.compile("^gone: NOT REACHABLE", re.M))).to_be_visible()  # the status line

            page.goto(url + "?system=us")  # one system: its losses alone, and the links keep to it
            expect(rows.filter(has_text="fleet-us")).to_have_count(1, timeout=30_000)
            expect(rows.filter(has_text="fleet-eu")).to_have_count(0)
            expect(page.get_by_role("navigation", name="pages").get_by_role("link", name="Streams")) \
                .to_have_attribute("href", "/streams?system=us")

            for hostile in HOSTILE_SYSTEMS:  # not a system of the file: all systems, the page up
                page.goto(url + "?system=" + quote(hostile, safe=""))
                expect(rows.filter(has_text="fleet-eu")).to_have_count(1, timeout=30_000)
                expect(rows.filter(has_text="fleet-us")).to_have_count(1)
            page.goto(url + "streams?system=" + quote("<script>", safe=""))  # a page on one system: the first
            expect(page.get_by_role("navigation", name="systems").get_by_role("link", name="eu", exact=True)) \
                .to_have_attribute("aria-current", "true", timeout=30_000)

            page.goto(url + "streams?system=gone")  # a system not reached: said, nothing waited for
            expect(page.get_by_text("System gone is not reachable yet")).to_be_visible(timeout=30_000)

            page.goto(url + "streams?system=us")  # an edit on one system touches no other
            page.get_by_label("stream").select_option("SHARED")
            batched = page.get_by_role("checkbox", name="allow_batched")
            expect(batched).to_be_checked(timeout=15_000)  # the form filled with SHARED's settings
            batched.uncheck()
            expect(page.get_by_text("allow_batched: True → False")).to_be_visible()
            page.get_by_role("button", name="Apply · us").click()
            expect(page.get_by_text("Applied to SHARED.")).to_be_visible(timeout=15_000)
            assert run_apart(_batched(us.url)) is False
            assert run_apart(_batched(eu.url)) is True
        finally:
            for proc in (web, collector):
                proc.terminate()
                proc.wait(timeout=20)
        said = (tmp_path / "web.log").read_text()
        assert "system gone: not reachable" in said, said[-2000:]
