"""The Consumers page in Chromium at 1280 px on the shared console: each consumer's numbers are the
server's, a pause and a reset from the form are applied on the server, a refusal of the server is said
beside the form with its code and text, and the read-only console draws no control that changes one."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.processes import nats_tool


def consumer(url: str, name: str) -> dict:
    return json.loads(nats_tool("consumer", url, "UI_CONS", name))


def test_each_number_is_the_server_s_and_a_pause_and_reset_are_applied_and_a_refusal_said(console, read_only_url,
                                                                                           page, screenshots):
    nats_url, web_url = console
    nats_tool("seed-consumers", nats_url, "UI_CONS")
    page.goto(web_url + "consumers?stream=UI_CONS")
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)  # the live page, not its inert first copy
    row = page.get_by_role("row").filter(has_text="billing")
    expect(row).to_contain_text("10", timeout=30_000)  # pending, as the server says
    assert consumer(nats_url, "billing") == {"paused": False, "pending": 10, "ack_pending": 0, "delivered": 0}
    expect(page.get_by_text("2 consumer(s) of UI_CONS")).to_be_visible()
    page.get_by_label("consumer").select_option("UI_CONS/billing")
    page.get_by_role("button", name="Pause for").click()
    expect(page.get_by_text("consumer.pause UI_CONS/billing until")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text="billing")).to_contain_text("paused", timeout=30_000)
    assert consumer(nats_url, "billing")["paused"]
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_text("consumer.resume UI_CONS/billing: done")).to_be_visible(timeout=30_000)
    page.get_by_label("sequence").fill("5")
    page.get_by_label("sequence").press("Enter")
    page.get_by_role("button", name="Reset to seq").click()
    expect(page.get_by_text("next message seq 5, 6 pending")).to_be_visible(timeout=30_000)
    assert consumer(nats_url, "billing")["delivered"] == 4
    page.screenshot(path=screenshots / "consumers.png", full_page=True)

    page.get_by_label("consumer").select_option("UI_CONS/doomed")
    page.get_by_role("button", name="Delete").click()  # once: asked to confirm, nothing deleted
    expect(page.get_by_text("Click Delete again within 10 s")).to_be_visible(timeout=30_000)
    assert consumer(nats_url, "doomed")["pending"] == 10
    nats_tool("delete-consumer", nats_url, "UI_CONS", "doomed")  # gone behind the page's back: the server says so
    page.get_by_label("consumer").select_option("UI_CONS/doomed")
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_text("[10014] consumer not found")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("The server refused:")).to_be_visible()

    page.goto(read_only_url + "consumers?stream=UI_CONS")
    expect(page.get_by_role("row").filter(has_text="billing")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("button", name="Pause for")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.goto(web_url + "consumers?stream=UI_CONS")
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
    page.get_by_label("consumer").select_option("UI_CONS/billing")
    page.get_by_role("button", name="Delete").click()
    page.get_by_role("button", name="Delete").click()  # twice within 10 s: deleted
    expect(page.get_by_text("consumer.delete UI_CONS/billing: done")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("0 consumer(s) of UI_CONS")).to_be_visible(timeout=30_000)  # doomed is gone too
    expect(page.get_by_text("Lag in seconds: the consumers most behind")).to_be_hidden()  # nothing behind: no frame
    # a filter that reaches no subject: a name no stream has shows no consumer, and breaks nothing
    assert page.goto(web_url + "consumers?stream=" + "x" * 300).status == 200
    expect(page.get_by_text("0 consumer(s) of xxx")).to_be_visible(timeout=30_000)
    page.goto(web_url + "consumers?stream=%3Cimg%20src%3Dx%3E")  # a name the server allows: shown as text
    expect(page.get_by_text("0 consumer(s) of <img src=x>")).to_be_visible(timeout=30_000)
