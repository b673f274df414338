"""The Conformance page and the Incident view's verdict line against a real console with a system
account (publishers named) and the publish side tapped: a faulty publisher is a row that does not
conform, each failure with the ADR's words and its batch linked to its Incident; the `client` filter
in the URL is hostile input like any other."""

import json
import re
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.integration.test_collector_sources import ACCOUNTS
from tests.processes import CLI, free_port, wait_collecting, wait_http
from tests.waits import poll_until

APP = ["--user", "app", "--password", "app-secret"]


@pytest.fixture(scope="module")
def graded_console(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conformance-console")
    with EmbeddedServer(tmp / "nats", batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as server:
        procs = []

        def start(args, name):
            log = tmp / f"{name}.log"
            procs.append(subprocess.Popen([CLI, *args, "--server", server.url, *APP, "--data-dir", str(tmp)],
                                          stdout=open(log, "w"), stderr=subprocess.STDOUT))
            return procs[-1], log

        collector, collector_log = start(["collect", "--system-user", "sys", "--system-password", "sys-secret",
                                          "--tap-publish-side", "conf.>"], "collector")
        port = free_port()
        web, web_log = start(["serve", "--port", str(port)], "web")
        url = f"http://127.0.0.1:{port}/"
        wait_http(url, web, web_log)
        wait_collecting(collector, collector_log)  # graded from the taps: in place before a test publishes
        try:
            yield server.url, url, tmp
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=20)


def test_a_faulty_publisher_is_a_row_that_does_not_conform_with_its_batches_linked(graded_console, page, screenshots):
    nats_url, web_url, _ = graded_console
    faulty = subprocess.Popen([sys.executable, "-m", "tests.integration.faulty_publishers", nats_url, "F05", "F09"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert faulty.stdout.readline().strip() == "published"
        shown(page, web_url, screenshots)
    finally:
        faulty.stdin.close()
        faulty.wait(timeout=20)


def shown(page, web_url, screenshots):
    page.goto(web_url + "conformance")
    row = page.get_by_role("row").filter(has_text="faulty-F05").filter(has_text="does not conform")
    expect(row).to_be_visible(timeout=30_000)
    failure = page.get_by_role("row").filter(has_text="F05 keeps within its outstanding-ack window")
    expect(failure).to_contain_text("maintain a count of maximum outstanding acknowledgements")  # the ADR's words
    expect(failure).to_contain_text("messages beyond the last ack")  # what was seen
    expect(failure.get_by_role("link", name="investigate")).to_have_attribute("href", re.compile(r"^/incident\?batch=\w+$"))
    page.screenshot(path=screenshots / "conformance.png", full_page=True)

    page.goto(web_url + "conformance?client=faulty-F09")
    expect(page.get_by_role("row").filter(has_text="faulty-F09").filter(has_text="does not conform")).to_be_visible(
        timeout=30_000)
    expect(page.get_by_role("row").filter(has_text="faulty-F05")).to_have_count(0)
    lost = page.get_by_role("row").filter(has_text="F09 stops a batch the server no longer knows")
    lost.get_by_role("link", name="investigate").click()
    expect(page.get_by_text("does not conform to ADR-50")).to_be_visible(timeout=30_000)  # the Incident's line
    expect(page.get_by_text("F09 stops a batch the server no longer knows (10208)")).to_be_visible()
    page.screenshot(path=screenshots / "incident-verdict.png", full_page=True)


@pytest.mark.parametrize("client", ["<script>alert(1)</script>", "x" * 20_000, "%00%1b[2J", "faulty-F05%0d%0aX: y"])
def test_a_hostile_client_filter_is_text_and_the_page_stands(graded_console, page, client):
    _, web_url, _ = graded_console
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    response = page.goto(web_url + "conformance?client=" + client)
    assert response.status in (200, 414), response.status
    if response.status == 200:
        expect(page.get_by_text("Conformance of batch publishers to ADR-50")).to_be_visible()
    assert dialogs == []


def test_the_cli_report_is_one_a_team_can_attach_to_a_bug(graded_console):
    """Markdown with the ADR's words, exit 1 (a client does not conform). Its own faulty publishers: a
    test without a browser may get the module's console made again (pytest groups by browser)."""
    nats_url, _, data_dir = graded_console
    faulty = subprocess.Popen([sys.executable, "-m", "tests.integration.faulty_publishers", nats_url, "F05", "F09"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert faulty.stdout.readline().strip() == "published"

        def reported():
            done = subprocess.run([CLI, "conformance", "--server", nats_url, *APP, "--data-dir", str(data_dir),
                                   "--format", "markdown"], capture_output=True, text=True, timeout=60)
            return done if done.returncode == 1 and "## faulty-F09" in done.stdout else None

        done = poll_until(reported, 60, "no report naming the faulty clients", every=1.0)
    finally:
        faulty.stdin.close()
        faulty.wait(timeout=20)
    assert "## faulty-F05 (python3" in done.stdout
    assert "| F05 keeps within its outstanding-ack window | fail |" in done.stdout
    assert "**F05** (ADR-50, Fast-ingest Batch Publishing / Flow Control)" in done.stdout
    as_json = subprocess.run([CLI, "conformance", "--server", nats_url, *APP, "--data-dir", str(data_dir),
                              "--format", "json", "--window", "60"], capture_output=True, text=True, timeout=60)
    clients = {c["publisher"]["name"]: c for c in json.loads(as_json.stdout)["clients"] if c["publisher"]}
    assert clients["faulty-F09"]["results"]["F09"]["status"] == "fail"
    refused = subprocess.run([CLI, "conformance", "--server", nats_url, "--window", "1e400"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "at most a year" in refused.stderr
