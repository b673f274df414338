
from playwright.sync_api import expect

from tests.processes import nats_tool


def open_replay(page, url, stream):
    page.goto(url + "replay")
    expect(page.get_by_label("stream", exact=True)).to_contain_text(stream, timeout=30_000)
    page.get_by_label("stream", exact=True).select_option(stream)


def test_fetch_and_next_show_batch_headers_and_ack_leaves_the_consumers_pending(console, page, screenshots):
    nats_url, web_url = console
    nats_tool("seed-replay", nats_url, "UI_REPLAY")
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_replay(page, web_url, "UI_REPLAY")
    expect(page.get_by_label("consumer", exact=True)).to_contain_text("ops (4 pending")
    page.get_by_label("consumer", exact=True).select_option(index=1)

    page.get_by_role("button", name="Next").click()
    expect(page.get_by_text("stream seq 1", exact=False)).to_be_visible(timeout=15_000)
    expect(page.get_by_text("<img src=x onerror=alert(1)>")).to_be_visible()  # the payload, as text
    assert page.locator("img[src='x']").count() == 0 and dialogs == []

    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("3 message(s)", exact=False)).to_be_visible(timeout=15_000)
    expect(page.get_by_role("cell", name="Nats-Batch-Id")).to_have_count(3)
    expect(page.get_by_role("cell", name="replay-b1")).to_have_count(3)
    expect(page.get_by_text("awaiting ack", exact=False).first).to_contain_text("4 awaiting ack")

    page.get_by_role("button", name="Ack", exact=True).first.click()
    expect(page.get_by_text("Ack confirmed by the server.", exact=False)).to_contain_text("3 awaiting ack",
                                                                                        timeout=15_000)
    assert nats_tool("ack-pending", nats_url, "UI_REPLAY") == "3"
    page.screenshot(path=screenshots / "replay.png", full_page=True)

    page.get_by_label("batch id").fill("replay-b1")
    page.get_by_role("button", name="Replay batch").click()
    expect(page.get_by_text("Batch replay-b1: 3 stored message(s) in batch order, complete")).to_be_visible(
        timeout=15_000)


def test_read_only_replay_peeks_without_action_buttons(console, read_only_url, page):
    nats_url, _ = console
    nats_tool("seed-replay", nats_url, "UI_REPLAY_RO")
    open_replay(page, read_only_url, "UI_REPLAY_RO")
    expect(page.get_by_label("consumer", exact=True).locator("option")).to_have_count(1)  # the peek only
    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("4 message(s)", exact=False)).to_be_visible(timeout=15_000)
    expect(page.get_by_role("cell", name="replay-b1")).to_have_count(3)
    for action in ("Ack", "Nak", "Term", "In progress"):
        expect(page.get_by_role("button", name=action, exact=True)).to_have_count(0)
    assert nats_tool("ack-pending", nats_url, "UI_REPLAY_RO") == "0"


def test_a_message_of_long_unbroken_tokens_stays_inside_1280_pixels(console, page):
    """A payload of escaped JSON (no space for 5,000 characters) and a long header value: before, the page
    grew to 3,668 px wide at 1280 (seen on up --demo's own advisory streams)."""
    import nats

    from tests.fleet import run_apart

    nats_url, web_url = console

    async def publish() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await js.add_stream(name="UI_WIDE", subjects=["ui_wide.>"])
        await js.publish("ui_wide.x", b'{"response": "' + b"\\\"x\\\":1," * 700 + b'"}', headers={"Trace": "t" * 600})
        await nc.close()

    run_apart(publish())
    page.set_viewport_size({"width": 1280, "height": 800})
    open_replay(page, web_url, "UI_WIDE")
    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("1 message(s)", exact=False)).to_be_visible(timeout=15_000)
    widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"replay is {widths[0]} px wide in a {widths[1]} px window"
