"""The first hour, as a new operator has it: a fresh data directory, `up --demo` as the README says, the
pages in Chromium at 1280x800 and the CLI beside them. The audit trail verifies before anyone acts; a
mute and an unmute from the Alerts page hold within 10 s without a restart (the page, the badge and
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

from playwright.sync_api import expect

from console.pages import PAGES
from tests.processes import CLI
from tests.ui.test_up import data_dir, up  # noqa: F401 (the fixture)
from tests.waits import poll_until

RULE = "atomic batch timed out"  # the demo abandons one atomic batch for a timeout every round


def cli(data, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args, "--data-dir", str(data)], capture_output=True, text=True, timeout=120)


def firing_in_metrics(metrics_url: str) -> set[str]:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    return {m.group(1) for m in re.finditer(r'^batch_console_alerts_firing\{rule="([^"]+)".*\} 1', text, re.M)}


def test_the_first_hour_of_a_fresh_console_is_true(up, browser, screenshots):  # noqa: F811
    _, log, web_url, _ = up
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
    expect(page.get_by_text(f"{RULE} muted.")).to_be_visible(timeout=10_000)
    expect(page.get_by_label("rule (TOML)")).to_have_value(re.compile("muted = true"))  # the rule, not the example
    poll_until(lambda: RULE not in firing_in_metrics(metrics), 10, "a mute did not hold within 10 s")
    expect(rules.first).to_contain_text("muted", timeout=10_000)
    page.get_by_role("button", name="Unmute").click()
    poll_until(lambda: RULE in firing_in_metrics(metrics), 15, "an unmute did not hold within a demo round")

    checked = cli(data, "check")
    assert "assumed" not in checked.stdout + checked.stderr and "BATCH_022" not in checked.stdout, checked.stdout

    page.goto(web_url + "conformance")
    demo = page.get_by_role("row").filter(has_text="batch-console demo (deliberate faults)")
    expect(demo.first).to_be_visible(timeout=60_000)
    verdict = demo.first.bounding_box()
    assert verdict is not None and verdict["x"] + verdict["width"] > 0
    failing = page.get_by_role("columnheader", name="failing")
    box = failing.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280, box  # the failing statements are in view

    page.goto(web_url)  # every one of the demo's losses has its stream and its publisher, the dropped one too
    expect(page.get_by_role("row").filter(has_text="dropped").first).to_contain_text("DEMO_INGEST", timeout=90_000)
    shown = page.inner_text("body")
    assert "(unknown)" not in shown and "publisher unknown" not in shown

    page.get_by_role("link", name="DEMO_ORDERS").first.click()  # a stream's name goes to its page
    expect(page.get_by_text("Stream DEMO_ORDERS")).to_be_visible(timeout=30_000)
    page.goto(web_url + "conformance")  # a failure's batch goes to its Incident, which shows that batch
    page.get_by_role("link", name="investigate").first.click()
    page.wait_for_url(re.compile(r"/incident\?batch="), timeout=30_000)
    batch = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["batch"][0]
    expect(page.get_by_text(batch).first).to_be_visible(timeout=30_000)

    for path, title in PAGES.items():
        page.goto(web_url + path.lstrip("/"))
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
        page.screenshot(path=screenshots / f"first-hour-{title.lower()}.png")
    assert cli(data, "audit", "--verify").returncode == 0  # the mutes are in it, and it still holds
