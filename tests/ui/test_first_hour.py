"""The first hour, as a new operator has it: a fresh data directory, `up --demo` as the README says, the
pages in Chromium at 1280x800 and the CLI beside them. The audit trail verifies before anyone acts; a
mute and an unmute from the Alerts page hold without a restart (within 10 s on an idle machine; the
test allows 30 s, for a CI machine at three times its cores' load) (the page, the badge and
/metrics agree); `check` beside `up` reads the server's limits through the system account `up` made;
the demo's publisher is named as the demo's deliberate faults and none of its losses is "(unknown)";
a stream's name and a failure's batch link where they say; each page's key columns are in view.
Screenshots of every page are kept in the screenshots folder."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import nats
import pytest
from playwright.sync_api import expect

from console.pages import PAGES
from tests.fleet import run_apart
from tests.processes import CLI
from tests.ui.columns import key_columns_in_view_and_no_text_cut
from tests.ui.reading import page_text
from tests.ui.test_up import data_dir, up  # noqa: F401 (the fixture)
from tests.waits import poll_until

RULE = "atomic batch timed out"  # the demo abandons one atomic batch for a timeout every round


def cli(data, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args, "--data-dir", str(data)], capture_output=True, text=True, timeout=120)


def firing_in_metrics(metrics_url: str) -> set[str]:
    text = urllib.request.urlopen(metrics_url, timeout=30).read().decode()
    return {m.group(1) for m in re.finditer(r'^batch_console_alerts_firing\{rule="([^"]+)".*\} 1', text, re.M)}


@pytest.mark.timeout(600)  # every page, the CLI and the notebooks: past the suite's 300 s on a loaded 2-core machine
def test_the_first_hour_of_a_fresh_console_is_true(up, browser, screenshots):  # noqa: F811
    _, log, web_url, nats_url = up
    data = data_dir(log)
    verified = cli(data, "audit", "--verify")  # before anyone has done anything
    assert verified.returncode == 0 and "chain intact" in verified.stderr, verified.stderr
    metrics = json.loads((data / "up.json").read_text())["metrics"]

    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(web_url + "alerts?" + urllib.parse.urlencode({"rule": RULE}))
    rules = page.get_by_role("row").filter(has_text=RULE).filter(has_text="lost_batches")
    expect(rules.first).to_contain_text("FIRING", timeout=90_000)
    expect(page.get_by_label("rule (TOML)")).to_have_value(re.compile(re.escape(f'name = "{RULE}"')))
    poll_until(lambda: RULE in firing_in_metrics(metrics), 30, "the rule was not firing in /metrics")

    page.get_by_role("button", name="Mute", exact=True).click()
    expect(page.get_by_text(f"{RULE} muted.")).to_be_visible(timeout=30_000)
    expect(page.get_by_label("rule (TOML)")).to_have_value(re.compile("muted = true"))  # the rule, not the example
    poll_until(lambda: RULE not in firing_in_metrics(metrics), 30, "a mute did not hold within 30 s")
    expect(rules.first).to_contain_text("muted", timeout=30_000)
    page.get_by_role("button", name="Unmute").click()
    poll_until(lambda: RULE in firing_in_metrics(metrics), 45, "an unmute did not hold within a demo round")

    checked = cli(data, "check")
    assert "assumed" not in checked.stdout + checked.stderr and "BATCH_022" not in checked.stdout, checked.stdout

    page.goto(web_url + "conformance")
    demo = page.get_by_role("row").filter(has_text="batch-console demo (deliberate faults)")
    expect(demo.first).to_be_visible(timeout=60_000)
    # the table redraws as verdicts come: a row seen can be replaced before it is measured
    verdict = poll_until(demo.first.bounding_box, 30, "the demo's row was not drawn", every=0.5)
    assert verdict["x"] + verdict["width"] > 0
    failing = page.get_by_role("columnheader", name="failing")
    box = poll_until(failing.bounding_box, 30, "the failing column was not drawn", every=0.5)
    assert box["x"] + box["width"] <= 1280, box  # the failing statements are in view

    page.goto(web_url)  # every one of the demo's losses has its stream and its publisher, the dropped one too
    expect(page.get_by_role("row").filter(has_text="dropped").first).to_contain_text("DEMO_INGEST", timeout=90_000)
    shown = page_text(page)
    assert "(unknown)" not in shown and "publisher unknown" not in shown

    page.get_by_role("link", name="DEMO_ORDERS").first.click()  # a stream's name goes to its page
    expect(page.get_by_text("Stream DEMO_ORDERS")).to_be_visible(timeout=30_000)
    page.goto(web_url + "conformance")  # a failure's batch goes to its Incident, which shows that batch
    page.get_by_role("link", name="investigate").first.click()
    page.wait_for_url(re.compile(r"/incident\?batch="), timeout=30_000)
    batch = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["batch"][0]
    expect(page.get_by_text(batch).first).to_be_visible(timeout=30_000)

    follow_every_link(page, web_url)
    the_cli_and_the_pages_agree(page, web_url, data)
    the_streams_page_says_what_the_server_holds(page, web_url, nats_url)
    kept = ARTIFACTS / "first-hour"
    kept.mkdir(parents=True, exist_ok=True)
    for path, title in PAGES.items():
        page.goto(web_url + path.lstrip("/"))
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
        key_columns_in_view_and_no_text_cut(page, path)
        page.screenshot(path=kept / f"{title.lower()}.png")
    assert not firing_in_metrics(metrics) & HEALTH_RULES  # no part of a healthy console is said to be sick
    page.goto(web_url + "alerts")
    expect(page.get_by_role("row").filter(has_text=RULE).first).to_be_visible(timeout=30_000)
    assert "(unknown)" not in page_text(page)
    the_demo_reader_is_counted_in_batches(page, web_url, nats_url, data)
    the_notebooks_run_beside_up(data)
    assert cli(data, "audit", "--verify").returncode == 0  # the mutes are in it, and it still holds


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-results"  # pytest-playwright's output folder, kept by CI
HEALTH_RULES = {"collector silent"}
# The columns an operator decides on, wherever a table has them: each must be in view at 1280 px.
def follow_every_link(page, web_url: str) -> None:
    """Every stream name and batch id on Live and History goes where it says: the stream's page, the
    batch's Incident (a few of each kind, each different)."""
    for origin in ("", "history"):
        page.goto(web_url + origin)
        expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)  # the live page, not its first copy
        expect(page.locator("a[href*='/incident?batch=']").first).to_be_attached(timeout=90_000)
        hrefs = page.eval_on_selector_all("a[href*='/stream?name='], a[href*='/incident?batch=']",
                                          "links => [...new Set(links.map(a => a.getAttribute('href')))]")
        streams = [h for h in hrefs if "/stream?" in h][:4]
        batches = [h for h in hrefs if "/incident?" in h][:4]
        assert streams and batches, f"/{origin}: no stream or batch links: {hrefs}"
        for href in streams + batches:
            query = urllib.parse.parse_qs(urllib.parse.urlparse(href).query)
            page.goto(urllib.parse.urljoin(web_url, href))
            if "name" in query:
                expect(page.get_by_text(f"Stream {query['name'][0]}")).to_be_visible(timeout=30_000)
            else:
                summary = page.get_by_text(re.compile(re.escape(query["batch"][0]) + r".*(lost|ended|abandon)"))
                expect(summary.first).to_be_visible(timeout=30_000)
                assert "No lost batch" not in page_text(page), href


def the_demo_reader_is_counted_in_batches(page, web_url: str, nats_url: str, data) -> None:
    """The demo's reader of the committed orders: the batches it read whole are the stream's batch ends at or
    below its ack floor, as this test counts them from the stored headers; the Consumers page says so too."""
    listed = cli(data, "consumers", "list", "--stream", "DEMO_ORDERS", "--format", "json")
    [reader] = [r for r in json.loads(listed.stdout) if r["consumer"] == "demo-reader"]
    assert reader["batches_read_whole"] == run_apart(_batch_ends_up_to("DEMO_ORDERS", nats_url, reader["ack_floor_seq"]))
    page.goto(web_url + "consumers?stream=DEMO_ORDERS")
    expect(page.get_by_role("row").filter(has_text="demo-reader")).to_contain_text("read whole", timeout=30_000)


async def _batch_ends_up_to(stream: str, nats_url: str, floor: int) -> int:
    nc = await nats.connect(nats_url)
    try:
        js, ends = nc.jetstream(), 0
        sub = await js.subscribe("", stream=stream, ordered_consumer=True, headers_only=True)
        while True:
            msg = await sub.next_msg(timeout=10)
            seq = msg.metadata.sequence.stream
            if seq > floor:
                return ends
            ends += (msg.headers or {}).get("Nats-Batch-Commit") == "1"
            if msg.metadata.num_pending == 0:
                return ends
    finally:
        await nc.close()


def the_cli_and_the_pages_agree(page, web_url: str, data) -> None:
    """`audit --verify`, `conformance` and `check` beside up say what the Audit, Conformance and Checks
    pages say (the demo runs on meanwhile: each is asked again until both read the same state)."""
    verified = cli(data, "audit", "--verify")
    said = re.search(r"^(.* record\(s\).*); chain intact$", verified.stderr, re.M)
    assert said, verified.stderr
    page.goto(web_url + "audit")
    expect(page.get_by_text(f"Chain intact: {said.group(1)},")).to_be_visible(timeout=30_000)

    def conformance_agrees() -> bool:
        clients = json.loads(cli(data, "conformance", "--format", "json").stdout)["clients"]
        failing = sum(1 for c in clients if c["conforms"] is False)
        page.goto(web_url + "conformance")
        shown = page.get_by_text(re.compile(r"client\(s\) graded"))
        expect(shown).to_be_visible(timeout=30_000)
        return f"{len(clients)} client(s) graded, {failing} do not conform" in shown.inner_text()
    poll_until(conformance_agrees, 90, "the Conformance page and `conformance` never agreed")

    def checks_agree() -> bool:
        found = json.loads(cli(data, "check", "--format", "json").stdout)
        page.goto(web_url + "checks")
        shown = page.get_by_text(re.compile(r"finding\(s\) of \d+ checks run"))
        expect(shown).to_be_visible(timeout=30_000)
        return f"{found['status'].upper()}: {len(found['findings'])} finding(s)" in shown.inner_text()
    poll_until(checks_agree, 120, "the Checks page and `check` never agreed")


async def _stream_configs(nats_url: str) -> dict[str, dict]:
    """Every stream's config as the server answers $JS.API.STREAM.INFO (its JSON, read here, not by the console)."""
    nc = await nats.connect(nats_url)
    try:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=10)).data)["streams"]
        return {name: json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=10)).data)["config"]
                for name in names}
    finally:
        await nc.close()


def the_streams_page_says_what_the_server_holds(page, web_url: str, nats_url: str) -> None:
    """Each stream's row on the Streams page, cell by cell, is the server's config of it."""
    configs = run_apart(_stream_configs(nats_url))
    page.goto(web_url + "streams")
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
    for name, config in configs.items():
        level = (config.get("metadata") or {}).get("_nats.req.level", "")
        expected = [name, level, str(bool(config.get("allow_atomic"))).lower(),
                    str(bool(config.get("allow_batched"))).lower(), config.get("persist_mode") or "default",
                    str(config["num_replicas"]), str("mirror" in config).lower(), str(len(config.get("sources") or []))]
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name=name, exact=True))
        expect(row.first).to_be_visible(timeout=30_000)
        cells = [c.strip() for c in row.first.get_by_role("gridcell").all_inner_texts()]
        assert cells[:len(expected)] == expected, (name, cells, config)


def the_notebooks_run_beside_up(data) -> None:
    """Both notebooks, from notebooks/, with nothing set but the data directory: up's URLs from up.json."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from tests.analytics.test_notebooks import NOTEBOOKS, execute

    env = {"BATCH_CONSOLE_DATA_DIR": str(data), "REPLAY_STREAM": "DEMO_ORDERS"}

    def run(name: str) -> str:  # in a thread: Playwright's sync API holds this one's event loop
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, execute(name, env, NOTEBOOKS)).result()[0]

    text = run("quickstart.ipynb")
    assert re.search(r"[1-9]\d* lost batches in the last hour", text), text[:2000]
    assert "replay DEMO_ORDERS: 5 messages fetched" in text, text[:2000]
    assert re.search(r"[1-9]\d* canary batch\(es\) in the last hour", text), text[:2000]  # up --demo runs it
    assert "(unknown)" not in text
    text = run("incident_investigation.ipynb")
    assert "investigating" in text and "no lost batch to investigate" not in text, text[:2000]
    assert re.search(r"\d+ messages from|the batch's stream is not known", text), text[:2000]
