"""`serve --systems FILE`: one web console over several NATS systems. Live, History and Checks show every
system's with their system, and each system's alone when the URL names it; a system that is not
reachable is said on every page and delays none; a page on one system acts on it alone, each button
naming it. The alerts part of every system serves one /metrics, each sample with its system."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import nats
from nats.js.api import AckPolicy, ConsumerConfig
import pytest
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from console.widgets import delta_frame
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon, metrics_text, run_apart, systems_text
from tests.processes import CLI, free_port, probe, wait_http
from tests.ui.columns import key_columns_in_view_and_no_text_cut
from tests.waits import collector_ready, poll_until

HOSTILE_SYSTEMS = ["nope", "x" * 5000, "eu\n", "eu\x00", "../eu", "<script>alert(1)</script>", "EU", " eu"]


@dataclass
class Fleet:
    url: str  # the web console's
    metrics: str
    servers: dict[str, EmbeddedServer]
    systems: Path
    data: Path
    logs: Path


async def _losses_and_a_shared_stream(servers: dict[str, EmbeddedServer], collector) -> None:
    for name, server in servers.items():
        nc = await nats.connect(server.url)
        await collector_ready(nc.jetstream(), collector)
        await abandon(nc, f"FLEET_{name.upper()}", f"fleet-{name}")
        await nc.jetstream().add_stream(name="SHARED", subjects=["shared"], allow_atomic=True, allow_batched=True)
        await nc.jetstream().publish("shared", f"from-{name}".encode())  # a message for Replay on each
        await nc.jetstream().add_consumer("SHARED", ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT))
        await nc.close()


async def _pending(url: str) -> tuple[int, int]:
    """SHARED's consumer ops: (messages not delivered yet, delivered and not acked)."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().consumer_info("SHARED", "ops")
        return info.num_pending, info.num_ack_pending
    finally:
        await nc.close()


async def _batched(url: str) -> bool:
    nc = await nats.connect(url)
    try:
        return bool((await nc.jetstream().stream_info("SHARED")).config.allow_batched)  # false is left out
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Systems eu and us (a server each, one loss each, a stream SHARED on both) and gone (never up): one
    collector, one alerts part (checks every second) and one web console over the three."""
    tmp = tmp_path_factory.mktemp("fleet")
    with EmbeddedServer(tmp / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp / "us", batch_limits=TEST_LIMITS) as us:
        systems, data = tmp / "systems.toml", tmp / "data"
        systems.write_text(systems_text(eu=eu.url, us=us.url, gone=f"nats://127.0.0.1:{free_port()}"))
        common = ["--systems", str(systems), "--connect-timeout", "1", "--data-dir", str(data)]
        port, metrics_port = free_port(), free_port()
        started = []
        for name, args in (("collector", ["collect", "--batch-timeout", "1"]),
                           ("web", ["serve", "--port", str(port)]),
                           ("alerts", ["alerts", "--metrics-port", str(metrics_port), "--check-every", "1"])):
            with open(tmp / f"{name}.log", "w") as log:
                started.append(subprocess.Popen([CLI, *args, *common], stdout=log, stderr=subprocess.STDOUT))
        try:
            wait_http(f"http://127.0.0.1:{port}/", started[1], tmp / "web.log")  # an unreachable system held nothing up
            run_apart(_losses_and_a_shared_stream({"eu": eu, "us": us}, started[0]))
            for server in (eu, us):  # a fast-ingest publisher on each, for the conformance verdicts
                probe(server.url, "fast", "--count", "2", "--batch-size", "5", "--stream", "FLEET_FAST",
                      "--subject", "fleet.fast")
            yield Fleet(f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{metrics_port}/metrics", {"eu": eu, "us": us},
                        systems, data, tmp)
        finally:
            for proc in started:
                proc.terminate()
                proc.wait(timeout=90)  # a fleet's collectors run at nice 10: a loaded machine starves their exit


def test_live_shows_every_systems_losses_and_each_system_alone(fleet, page):
    page.goto(fleet.url)  # every system: each loss once, with its system
    rows = page.get_by_role("row")
    for name in ("eu", "us"):
        expect(rows.filter(has_text=f"fleet-{name}")).to_have_count(1, timeout=60_000)
        expect(rows.filter(has_text=f"fleet-{name}").get_by_role("gridcell").nth(1)).to_have_text(name)
    expect(page.get_by_role("alert").filter(has_text="system gone is not reachable")).to_be_visible()
    expect(page.get_by_role("navigation", name="systems").get_by_role("link", name="All systems")) \
        .to_have_attribute("aria-current", "true")
    expect(page.get_by_text(re.compile("^gone: NOT REACHABLE", re.M))).to_be_visible()  # the status line
    # the API's losses are Live's: the same batches with the same systems, all or one system's
    bot = subprocess.run([CLI, "token", "create", "--name", "live-bot", "--role", "viewer", "--data-dir",
                          str(fleet.data)], capture_output=True, text=True, timeout=60).stdout.split()[-1]
    api = httpx.Client(base_url=fleet.url + "api/v1", headers={"Authorization": f"Bearer {bot}"}, timeout=30)
    shown = {(row.get_by_role("gridcell").nth(1).inner_text(), name) for name in ("fleet-eu", "fleet-us")
             for row in rows.filter(has_text=name).all()}
    assert {(i["system"], i["batch_id"]) for i in api.get("/losses").json()["items"]} == shown
    assert [i["batch_id"] for i in api.get("/losses", params={"system": "us"}).json()["items"]] == ["fleet-us"]
    assert {s["name"]: s["reachable"] for s in api.get("/systems").json()} == {"eu": True, "us": True, "gone": False}

    key_columns_in_view_and_no_text_cut(page, "/")  # two systems' tables at 1280 px: what is decided on, in view

    page.goto(fleet.url + "?system=us")  # one system: its losses alone, and the links keep to it
    expect(rows.filter(has_text="fleet-us")).to_have_count(1, timeout=30_000)
    expect(rows.filter(has_text="fleet-eu")).to_have_count(0)
    expect(page.get_by_role("navigation", name="pages").get_by_role("link", name="Streams")) \
        .to_have_attribute("href", "/streams?system=us")
    said = (fleet.logs / "web.log").read_text()
    assert "system gone: not reachable" in said, said[-2000:]


def test_a_url_naming_no_system_of_the_file_shows_all_of_them_or_the_first(fleet, page):
    rows = page.get_by_role("row")
    for hostile in HOSTILE_SYSTEMS:  # not a system of the file: all systems, the page up
        page.goto(fleet.url + "?system=" + quote(hostile, safe=""))
        expect(rows.filter(has_text="fleet-eu")).to_have_count(1, timeout=30_000)
        expect(rows.filter(has_text="fleet-us")).to_have_count(1)
    page.goto(fleet.url + "streams?system=" + quote("<script>", safe=""))  # a page on one system: the first
    expect(page.get_by_role("navigation", name="systems").get_by_role("link", name="eu", exact=True)) \
        .to_have_attribute("aria-current", "true", timeout=30_000)
    page.goto(fleet.url + "streams?system=gone")  # a system not reached: said, nothing waited for
    expect(page.get_by_text("System gone is not reachable yet")).to_be_visible(timeout=30_000)


def test_an_edit_on_one_system_names_it_and_touches_no_other(fleet, page):
    page.goto(fleet.url + "streams?system=us")
    page.get_by_label("stream").select_option("SHARED")
    batched = page.get_by_role("checkbox", name="allow_batched")
    expect(batched).to_be_checked(timeout=15_000)  # the form filled with SHARED's settings
    batched.uncheck()
    expect(page.get_by_text("allow_batched: True → False")).to_be_visible()
    page.get_by_role("button", name="Apply · us").click()
    expect(page.get_by_text("Applied to SHARED.")).to_be_visible(timeout=15_000)
    assert run_apart(_batched(fleet.servers["us"].url)) is False
    assert run_apart(_batched(fleet.servers["eu"].url)) is True



def test_history_checks_and_metrics_carry_each_system(fleet, page):
    for name in ("eu", "us"):  # one /metrics for every system, each sample with its system
        sample = f'batch_console_lost_batches_total{{system="{name}",stream="FLEET_{name.upper()}"'
        poll_until(lambda: sample in metrics_text(fleet.metrics), 60, f"{name}'s loss in /metrics")
    assert metrics_text(fleet.metrics).count("# TYPE batch_console_lost_batches ") == 1

    done = subprocess.run([CLI, "analytics", "--once", "--systems", str(fleet.systems), "--connect-timeout", "1",
                           "--data-dir", str(fleet.data)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "analytics: system gone: not run" in done.stdout
    for name in ("eu", "us"):
        assert f"analytics: system {name}: " in done.stdout
        assert (fleet.data / "systems" / name / "console.db").is_file()
        lost = delta_frame(fleet.data / "systems" / name, "abandoned_batches")  # as a notebook reads it
        assert set(lost["system"]) == {name} and f"fleet-{name}" in set(lost["batch_id"]), lost

    page.goto(fleet.url + "history")  # every system's abandoned batches, each with its system
    rows = page.get_by_role("row")
    for name in ("eu", "us"):
        expect(rows.filter(has_text=f"fleet-{name}").get_by_role("gridcell").first).to_have_text(name, timeout=30_000)
    page.goto(fleet.url + "history?system=eu")
    expect(rows.filter(has_text="fleet-eu")).to_have_count(1, timeout=30_000)
    expect(rows.filter(has_text="fleet-us")).to_have_count(0)

    page.goto(fleet.url + "checks")  # every system's evaluation, and the one not reached said
    expect(page.get_by_text(re.compile(r"Not checked: .*gone: not reachable"))).to_be_visible(timeout=30_000)
    expect(page.get_by_role("columnheader", name="system")).to_be_visible()


def test_conformance_shows_every_systems_clients_each_with_its_system(fleet, page):
    page.goto(fleet.url + "conformance")
    for name in ("eu", "us"):
        expect(page.get_by_role("row").filter(has_text=f"[{name}]").first).to_be_visible(timeout=60_000)
    page.goto(fleet.url + "conformance?system=eu")
    expect(page.get_by_role("row").filter(has_text="[eu]")).to_have_count(0)  # one system: as a console of one
    expect(page.get_by_role("row").filter(has_text="(publisher unknown)").first).to_be_visible(timeout=30_000)


async def _lost_again(servers: dict[str, EmbeddedServer]) -> None:
    """A loss more on each system, now: the shipped rules fire for 5 minutes after one, and on a loaded
    run the fixture's losses can be older than that by the time a later test reads the header (CI)."""
    for name, server in servers.items():
        nc = await nats.connect(server.url)
        await abandon(nc, f"FLEET_{name.upper()}", f"fleet-{name}-again")
        await nc.close()


def test_alerts_and_audit_show_every_system_each_row_with_its_system(fleet, page):
    run_apart(_lost_again(fleet.servers))
    page.goto(fleet.url + "alerts")  # the shipped rules fire on each system's abandonment
    alerts = page.get_by_role("row").filter(has_text="FLEET_")
    for name in ("eu", "us"):  # firing (or, the first loss's window past, among those sent): with its system
        expect(alerts.filter(has_text=f"FLEET_{name.upper()}").first.get_by_role("gridcell", name=name, exact=True)) \
            .to_have_count(1, timeout=60_000)
    # "All systems": every system's alerts counted once, in the header, and each system's collector
    badges = page.get_by_role("banner").get_by_role("status")
    expect(badges.filter(has_text=re.compile(r"^([2-9]|\d\d+) alerts firing$"))).to_have_count(1, timeout=30_000)
    for name in ("eu", "us"):
        expect(badges.filter(has_text=f"{name}: connected, collector alive")).to_have_count(1)
    page.goto(fleet.url)
    expect(page.get_by_text(re.compile("^gone: NOT REACHABLE", re.M))).to_be_visible(timeout=30_000)
    expect(page.get_by_text(re.compile("ALERTS FIRING"))).to_have_count(0)  # no second count in Live's status line

    page.goto(fleet.url + "audit")  # the edit on us (an earlier test of this module), with its system
    edit = page.get_by_role("row").filter(has_text="stream.edit").filter(has_text="SHARED")
    expect(edit.first).to_be_visible(timeout=30_000)
    expect(edit.first.get_by_role("gridcell").nth(1)).to_have_text("us")
    expect(page.get_by_text(re.compile("^Chain intact"))).to_be_visible()
    page.goto(fleet.url + "audit?system=eu")  # one system: its own trail, the edit not in it
    expect(page.get_by_text(re.compile("^Chain intact"))).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text="stream.edit")).to_have_count(0)


def test_a_replay_on_one_system_reads_and_acks_that_system_alone(fleet, page):
    page.goto(fleet.url + "replay?system=us&stream=SHARED")
    expect(page.get_by_label("consumer", exact=True)).to_contain_text("ops", timeout=30_000)
    page.get_by_label("consumer", exact=True).select_option(index=1)
    page.get_by_role("button", name="Fetch · us").click()
    expect(page.get_by_text("from-us")).to_be_visible(timeout=15_000)
    expect(page.get_by_text("from-eu")).to_have_count(0)
    page.get_by_role("button", name="Ack · us", exact=True).first.click()
    expect(page.get_by_text("Ack confirmed by the server.", exact=False)).to_be_visible(timeout=15_000)
    assert run_apart(_pending(fleet.servers["us"].url)) == (0, 0)
    assert run_apart(_pending(fleet.servers["eu"].url)) == (1, 0)  # eu's consumer untouched
