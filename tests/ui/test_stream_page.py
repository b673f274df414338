"""The page of one stream, reached from a stream name on Live: its settings, the server's limits,
its lost batch, and a link into Replay for it."""

import re

from playwright.sync_api import expect

from tests.processes import probe


def test_a_stream_name_on_live_opens_its_page_with_settings_limits_and_its_lost_batches(console, page, screenshots):
    nats_url, web_url = console
    batch = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_STREAM",
                  "--subject", "ui.stream")["abandoned_batch"]
    page.goto(web_url)
    row = page.get_by_role("row").filter(has_text=batch)
    row.get_by_role("link", name="UI_STREAM").click(timeout=30_000)
    expect(page).to_have_url(re.compile(r"/stream\?name=UI_STREAM$"))
    expect(page.get_by_role("heading", name="Stream UI_STREAM")).to_be_visible(timeout=30_000)
    settings = page.get_by_role("row").filter(has_text="R1")
    expect(settings).to_contain_text("true", timeout=30_000)  # the probe's stream allows both kinds
    expect(page.get_by_text("alone (no replicas)")).to_be_visible()
    limit = page.get_by_role("row").filter(has_text="batch timeout (idle between two messages)")
    expect(limit).to_contain_text("1.0 s", timeout=30_000)  # read from /varz after the settings
    lost = page.get_by_role("row").filter(has_text=batch)
    expect(lost).to_contain_text("timeout", timeout=30_000)
    expect(lost.get_by_role("link", name="investigate")).to_have_attribute("href", f"/incident?batch={batch}")
    expect(page.get_by_role("link", name="its messages in Replay")).to_have_attribute("href", "/replay?stream=UI_STREAM")
    # What tapping the publish side would cost, from the stream's own rate (nothing published: 0).
    expect(page.get_by_text(re.compile(r"Publish-side tap .* about 0\.0 msgs/s now"))).to_be_visible(timeout=30_000)
    page.screenshot(path=screenshots / "stream.png", full_page=True)
