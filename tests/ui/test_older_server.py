"""The console against nats-server 2.12 (atomic batches, no fast ingest), in the browser: the Streams
page names the release and what it lacks, turns allow_batched off and says why; the limits it does
not know for that release are said to be unknown; a stream's page warns of what 2.12 gets wrong."""

import subprocess

import pytest
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from tests.processes import CLI, free_port, nats_tool, wait_http
from tests.server_versions import binary

OLD = "2.12.8"


@pytest.fixture(scope="module")
def old_console(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("old")
    with EmbeddedServer(tmp / "nats", binary=binary(OLD), monitor_port=0) as server:
        nats_tool("seed-replay", server.url, "OLD_ORDERS")  # a stream allowing atomic batches
        port = free_port()
        log = tmp / "web.log"
        web = subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(tmp),
                                "--monitor-url", server.monitor_url], stdout=open(log, "w"), stderr=subprocess.STDOUT)
        try:
            wait_http(f"http://127.0.0.1:{port}/", web, log)
            yield f"http://127.0.0.1:{port}/"
        finally:
            web.terminate()
            web.wait(timeout=20)


def test_on_2_12_the_editor_offers_no_fast_ingest_and_says_why(old_console, page):
    page.goto(old_console + "streams?stream=OLD_ORDERS")
    expect(page.get_by_text(f"Server {OLD}, JetStream API level 3")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("lacks fast-ingest batches (allow_batched)")).to_be_visible()
    expect(page.get_by_role("checkbox", name="allow_batched")).to_be_disabled()
    expect(page.get_by_text(f"allow_batched: nats-server {OLD} has no fast ingest")).to_be_visible()
    expect(page.get_by_role("checkbox", name="allow_atomic")).to_be_enabled()
    per_server = page.get_by_role("row").filter(has_text="open batches per server")
    expect(per_server).to_contain_text(f"not reported by {OLD}")
    expect(per_server).to_contain_text(f"no fast ingest in {OLD}")


def test_on_2_12_a_stream_page_warns_of_what_the_release_gets_wrong_for_it(old_console, page):
    page.goto(old_console + "stream?name=OLD_ORDERS")
    expect(page.get_by_text(f"nats-server {OLD}: a batch over the in-flight limit is called incomplete")).to_be_visible(
        timeout=30_000)
    expect(page.get_by_text("scripts/repro/inflight_limit_called_incomplete.py", exact=False)).to_be_visible()
