"""The frame every page shares: nothing is fetched from anywhere but the console itself, the header
carries the navigation and the status badges, and the light/dark and UTC/local switches persist."""

import re
from urllib.parse import urlsplit

from playwright.sync_api import expect

from console.pages import PAGES
from tests.processes import probe

LOCAL_ZONE = "Asia/Tokyo"  # the browser's own zone in these tests: a reader far from UTC


def test_no_page_fetches_anything_from_anywhere_but_the_console(console, page):
    _, web_url = console
    origin = urlsplit(web_url).netloc
    elsewhere: list[str] = []

    def note(request):
        url = urlsplit(request.url)
        if url.scheme not in ("blob", "data") and url.netloc != origin:
            elsewhere.append(request.url)
    page.on("request", note)
    page.on("websocket", lambda ws: note(type("R", (), {"url": ws.url})))
    for path, name in PAGES.items():
        page.goto(web_url.rstrip("/") + path)
        nav = page.get_by_role("navigation", name="pages")
        expect(nav.get_by_role("link", name=name, exact=True)).to_have_attribute("aria-current", "page", timeout=30_000)
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
        page.wait_for_load_state("networkidle")
    assert elsewhere == []


def test_the_dark_theme_and_local_times_survive_a_reload(console, browser):
    nats_url, web_url = console
    context = browser.new_context(timezone_id=LOCAL_ZONE)
    page = context.new_page()
    try:
        batch = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_FRAME",
                      "--subject", "ui.frame")["abandoned_batch"]
        page.goto(web_url)
        row = page.get_by_role("row").filter(has_text=batch)
        expect(row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"), timeout=30_000)
        page.get_by_role("button", name="switch to dark theme").click()
        expect(page.get_by_role("button", name="switch to light theme")).to_be_visible(timeout=30_000)
        page.get_by_role("button", name="switch times to local time").click()
        expect(page.get_by_role("button", name="switch times to UTC")).to_have_text(f"Times: {LOCAL_ZONE}",
                                                                                     timeout=30_000)
        page.reload()
        expect(page.get_by_role("button", name="switch to light theme")).to_be_visible(timeout=30_000)
        expect(row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST"), timeout=30_000)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert sum(map(int, re.findall(r"\d+", background)[:3])) < 150, background  # dark
        page.goto(web_url + "history")  # its days are the reader's too, not UTC's beside local times
        expect(page.get_by_text(f"dates ({LOCAL_ZONE})")).to_be_visible(timeout=30_000)
    finally:
        context.close()


def test_a_shared_url_reopens_the_same_choices(console, page, browser):
    nats_url, web_url = console
    for name in ("UI_URL_A", "UI_URL_B"):
        probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", name, "--subject", name.lower() + ".x")
    page.goto(web_url + "streams")
    page.get_by_label("stream").select_option("UI_URL_B", timeout=30_000)
    expect(page).to_have_url(re.compile(r"/streams\?stream=UI_URL_B$"))
    shared = page.url
    other = browser.new_page()
    try:
        other.goto(shared)
        expect(other.get_by_label("stream")).to_have_value("UI_URL_B", timeout=30_000)
        expect(other.get_by_text("No change.")).to_be_visible()
    finally:
        other.close()
