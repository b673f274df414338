import json
import re
import subprocess
import time

import httpx

from playwright.sync_api import expect

from tests.processes import CLI, probe

# The hours the History plots show, from BokehJS's models (the axes are drawn on a canvas).
PLOTTED_HOURS = """() => {
  const ranges = [];
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.type === "Range1d" || m.constructor.name === "Range1d") ranges.push([m.start, m.end]);
  return ranges;
}"""


def test_history_shows_what_the_analytics_job_wrote_after_real_abandonments(console, data_dir, page, screenshots):
    nats_url, web_url = console
    abandoned = [probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_HIST",
                       "--subject", "ui.hist")["abandoned_batch"] for _ in range(3)]
    page.goto(web_url)
    for batch_id in abandoned:  # on Live, so the collector has logged them
        expect(page.get_by_text(batch_id)).to_be_visible(timeout=30_000)
    job = subprocess.run([CLI, "analytics", "--once", "--server", nats_url, "--data-dir", data_dir],
                         capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr[-3000:]
    page.goto(web_url + "history")
    top = page.get_by_role("row", name=re.compile(r"^UI_HIST atomic timeout"))
    expect(top).to_contain_text("3", timeout=30_000)  # three abandonments of UI_HIST, by reason timeout
    for batch_id in abandoned:
        expect(page.get_by_role("row").filter(has_text=batch_id)).to_be_visible()
    # the API's numbers are the page's: the same count by stream, the same batches in the ledger
    bot = subprocess.run([CLI, "token", "create", "--name", "history-bot", "--role", "viewer", "--data-dir", data_dir],
                         capture_output=True, text=True, timeout=60).stdout.strip().splitlines()[-1]
    api = httpx.Client(base_url=web_url + "api/v1", headers={"Authorization": f"Bearer {bot}"}, timeout=30)
    by_stream = api.get("/history/abandonments_by_stream").json()
    assert [r["batches"] for r in by_stream if (r["stream"], r["kind"], r["reason"]) == ("UI_HIST", "atomic", "timeout")] \
        == [3]
    assert {r["batch_id"] for r in api.get("/history/abandoned_batches").json()} >= set(abandoned)
    assert api.get("/history/abandoned_batches?domain=leaf1").json() == []  # no leaf here: none of its losses
    page.goto(web_url + "history?domain=leaf1")  # the page's filter from its URL: the same
    expect(page.get_by_text("the losses of domain leaf1 alone")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text=abandoned[0])).to_have_count(0)
    for hostile in ("a.b", "leaf%00", "x" * 65, "%3Cb%3Ex%3C/b%3E"):  # left out: every loss shown, the page up
        page.goto(web_url + f"history?domain={hostile}")
        expect(page.get_by_role("row").filter(has_text=abandoned[0])).to_be_visible(timeout=30_000)
    page.get_by_label("only the losses of the domain").fill("a.b")  # typed: said, and every loss shown
    page.get_by_label("only the losses of the domain").press("Enter")
    expect(page.get_by_text("Not a domain:")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text=abandoned[0])).to_be_visible()
    page.goto(web_url + "history")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    assert download.value.suggested_filename.startswith("abandoned_batches-")
    csv = open(download.value.path()).read()
    assert all(batch_id in csv for batch_id in abandoned) and "UI_HIST" in csv
    # the loss ledger in JSON lines and Parquet, each with the filters that made it
    page.get_by_label("format").select_option("jsonl")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download JSON lines").click()
    lines = open(download.value.path()).read().splitlines()
    assert json.loads(lines[0])["filters"]["table"] == "abandoned_batches"
    assert {json.loads(line)["batch_id"] for line in lines[1:]} >= set(abandoned)
    page.get_by_label("format").select_option("parquet")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download Parquet").click()
    import pyarrow.parquet as pq

    table = pq.read_table(download.value.path())
    assert set(table.column("batch_id").to_pylist()) >= set(abandoned)
    assert json.loads(table.schema.metadata[b"batch-console.filters"])["table"] == "abandoned_batches"
    expect(page.get_by_text(re.compile(r"^History up to .* UTC \(event-log sequence [\d,]+\)"))).to_be_visible()
    fourth = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_HIST",
                   "--subject", "ui.hist")["abandoned_batch"]
    expect(page.get_by_text(re.compile(r"\d+ events? behind Live"))).to_be_visible(timeout=30_000)  # on its timer
    job = subprocess.run([CLI, "analytics", "--once", "--server", nats_url, "--data-dir", data_dir],
                         capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr[-3000:]
    # a page left open reads the tables again once a run has committed: no stale "0" beside a fresh line
    expect(page.get_by_role("row").filter(has_text=fourth)).to_be_visible(timeout=30_000)
    expect(top).to_contain_text("4")
    [(start, end)] = page.evaluate(PLOTTED_HOURS)  # one range, both plots', fitted to the hours with data
    assert start <= time.time() * 1000 <= end and end - start <= 4 * 3600_000, (start, end)
    page.screenshot(path=screenshots / "history.png", full_page=True)


def test_a_lost_batch_on_live_opens_its_incident_with_context_and_a_report(console, page, screenshots):
    nats_url, web_url = console
    first = probe(nats_url, "atomic", "--count", "3", "--batch-size", "3", "--abandon", "--stream", "UI_INC",
                  "--subject", "ui.inc")["abandoned_batch"]
    second = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_INC",
                   "--subject", "ui.inc")["abandoned_batch"]
    page.goto(web_url)
    expect(page.get_by_text(second)).to_be_visible(timeout=30_000)
    page.get_by_role("row").filter(has_text=first).get_by_role("link", name="investigate").click()
    expect(page.get_by_text(f"atomic abandoned batch {first}: reason timeout").first).to_be_visible(timeout=30_000)
    timeline = page.get_by_role("row")
    expect(timeline.filter(has_text="stream_action")).not_to_have_count(0)  # the probe created UI_INC
    expect(timeline.filter(has_text=second)).to_be_visible()  # another abandonment on the same stream
    loss_row = timeline.filter(has_text="▶ ").first
    expect(loss_row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC"))
    expect(page.get_by_text(re.compile(r"\b\d{13}(\.\d+)?\b"))).to_have_count(0)  # no epoch milliseconds anywhere
    expect(page.get_by_role("link", name="the stream's messages in this window (Replay)")).to_be_visible()
    kept = page.locator(".bc-kept")  # the publish side is tapped: the batch's own first and last messages,
    for _ in range(10):              # written a few seconds after its loss: investigated again until there
        try:
            expect(kept).to_have_count(2, timeout=2_000)
            break
        except AssertionError:
            page.get_by_role("button", name="Investigate").click()
    expect(kept).to_have_count(2)
    expect(kept.first).to_contain_text("first · batch sequence 1 · ui.inc")
    expect(kept.last).to_contain_text("last · batch sequence 2 · ui.inc")
    expect(kept.first.locator("pre")).to_contain_text("pppp")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download report (Markdown)").click()
    assert download.value.suggested_filename == f"incident-{first}.md"
    report = open(download.value.path()).read()
    assert report.startswith(f"# Incident: batch {first}") and second in report
    assert "**First** (batch sequence 1) on ui.inc" in report and "\n    pppp" in report
    assert "## What is missing" in report and "batch sequence(s) 1-2 (exact)" in report  # tapped: its size known
    page.screenshot(path=screenshots / "incident.png", full_page=True)
    # its two messages were the whole batch as sent: they go again as a new atomic batch, the server's answer said
    page.get_by_role("button", name="Republish kept messages").click()
    expect(page.get_by_text(re.compile(r"batch\.republish: stored as batch \w+ of 2 at seq \d+"))).to_be_visible(
        timeout=30_000)


def test_a_probe_started_from_the_page_shows_up_on_live(console, page, screenshots):
    _, web_url = console
    page.goto(web_url + "probe")
    page.get_by_label("stream (created allowing both kinds when missing)").fill("UI_PROBE")
    page.get_by_label("subject").fill("ui.probe")
    page.get_by_role("checkbox", name="abandon the last atomic batch").check()
    page.get_by_role("button", name="Publish probe").click()
    abandoned = page.get_by_text("abandoned batch", exact=False).first
    expect(abandoned).to_be_visible(timeout=30_000)
    batch_id = abandoned.locator("code").inner_text()
    page.screenshot(path=screenshots / "probe.png", full_page=True)
    page.goto(web_url)
    expect(page.get_by_role("row").filter(has_text=batch_id)).to_contain_text("UI_PROBE", timeout=30_000)


def test_read_only_mode_has_no_probe(console, read_only_url, page):
    page.goto(read_only_url)
    expect(page.get_by_role("link", name="Replay")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("navigation", name="pages").get_by_role("link", name="Probe", exact=True)).to_have_count(0)
    assert page.goto(read_only_url + "probe").status == 404
