"""The Maintenance page over a real three-node cluster, in Chromium at 1280 px: the servers offered are
the cluster's, a plan names the streams the node leads and its verdict, a drain moves them (each in
the table, with where it went) and the node leads nothing after, as the server says; a hostile `node`
in the URL is left out; the drain is in the audit trail. Then the node is restarted with the command
serve was started with (never shown), and is back with a new server id."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import nats
import pytest
from nats.js.api import StreamConfig
from playwright.sync_api import expect

from console.config import CollectorSettings, env_name, event_key
from tests.conftest import CLUSTER_LIMITS
from tests.processes import CLI, free_port, wait_http
from tests.ui.reading import page_text

pytestmark = pytest.mark.cluster
STREAMS = ("MP_A", "MP_B")


async def _streams(url: str) -> str:
    """Two R3 streams, both led by one node: its name."""
    async with await nats.connect(url.split(",")) as nc:
        js = nc.jetstream()
        for name in STREAMS:
            await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3))
        node = (await js.stream_info("MP_A")).cluster.leader
        for _ in range(100):
            if (await js.stream_info("MP_B")).cluster.leader == node:
                return node
            await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.MP_B", ('{"placement":{"preferred":"%s"}}' % node).encode(),
                             timeout=5)
            await asyncio.sleep(0.3)
        raise AssertionError("MP_B not led by " + node)


async def _leaders(url: str) -> dict[str, str]:
    async with await nats.connect(url.split(",")) as nc:
        return {s: (await nc.jetstream().stream_info(s)).cluster.leader for s in STREAMS}


@pytest.fixture(scope="module")
def maintained(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("maintenance")
    event_key(data_dir=tmp)
    node = asyncio.run(_streams(cluster.url))
    port = free_port()
    log = tmp / "web.log"
    restart = f"{sys.executable} -m tests.restart_node {cluster.store_dir}/{{node}} --signal term"
    web = subprocess.Popen([CLI, "serve", "--server", cluster.url, "--port", str(port), "--data-dir", str(tmp),
                            "--restart-command", restart],
                           stdout=open(log, "w"), stderr=subprocess.STDOUT,
                           env={**os.environ, env_name(CollectorSettings, "batch_timeout"): str(CLUSTER_LIMITS.timeout)})
    try:
        wait_http(f"http://127.0.0.1:{port}/", web, log)
        yield f"http://127.0.0.1:{port}/", node, tmp, restart
    finally:
        web.terminate()
        web.wait(timeout=20)


def test_a_node_is_planned_and_drained_from_the_page(maintained, cluster, browser):
    url, node, data, restart = maintained
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(url + "maintenance?node=%1b%5b31m")  # not a server name: left out, the page as without it
    server = page.get_by_label("server")
    expect(server.locator("option")).not_to_have_count(0, timeout=30_000)
    assert server.locator("option").all_inner_texts() == ["n1", "n2", "n3"], server.locator("option").all_inner_texts()
    assert "\x1b" not in page_text(page)
    page.goto(url + f"maintenance?node={node}")  # a plan made at once for the node the URL names
    expect(page.get_by_text(f"{node}: SAFE")).to_be_visible(timeout=60_000)
    for stream in STREAMS:
        expect(page.get_by_role("gridcell", name=stream, exact=True)).to_be_visible()
    page.get_by_role("button", name=f"Drain {node}").click()
    expect(page.get_by_text(f"{node} drained: moved")).to_be_visible(timeout=90_000)
    assert "no batch was open at a step" in page_text(page)
    with ThreadPoolExecutor(1) as aside:  # the browser's loop runs in this thread
        leaders = aside.submit(asyncio.run, _leaders(cluster.url)).result()
    assert node not in leaders.values(), leaders
    for stream in STREAMS:  # each move in the table, with the node it went to
        expect(page.get_by_role("row").filter(has_text=stream).filter(has_text=leaders[stream]).first).to_be_visible()
    trail = subprocess.run([CLI, "audit", "--server", cluster.url, "--data-dir", str(data)], capture_output=True,
                           text=True, timeout=120)
    assert f"maintain.drain {node} accepted: plan safe; moved" in trail.stdout, trail.stdout

    page.get_by_role("button", name=f"Restart {node}").click()  # the command serve was started with
    expect(page.get_by_text(f"{node}: restarted (a new server id)")).to_be_visible(timeout=120_000)
    assert restart not in page_text(page)  # the command is never shown
    trail = subprocess.run([CLI, "audit", "--server", cluster.url, "--data-dir", str(data)], capture_output=True,
                           text=True, timeout=120)
    assert f"maintain.restart {node} accepted" in trail.stdout and restart not in trail.stdout, trail.stdout

    page.get_by_role("checkbox").check()  # "also move its replicas" (evacuate, 2.15): an R3 on three servers stays
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page.get_by_text("stream(s) stay, every server holding a replica already")).to_be_visible(timeout=90_000)
    expect(page.get_by_text("evacuate: 0 stream(s) can move their replica")).to_be_visible()
    page.screenshot(path="/tmp/maintenance-evacuate.png", full_page=True)
