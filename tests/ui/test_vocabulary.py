"""Every page at 1280x800, as an operator's laptop shows it: nothing runs off to the side, and every
stream name on it is a link to the stream's page."""

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect

from tests.processes import probe

STREAM = "AA_WORDS"  # first in the Streams table whatever other tests made: rows past its first screen are not drawn
PAGES = ["", "streams", "replay?stream=AA_WORDS", "history", "incident?batch={batch}", "alerts", "probe",
         "stream?name=AA_WORDS", "audit"]


@pytest.fixture(scope="module")
def lost_batch(console):
    nats_url, _ = console
    report = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", STREAM,
                   "--subject", "ui_words.x")
    return report["abandoned_batch"]


@pytest.mark.parametrize("path", PAGES)
def test_a_page_fits_1280_pixels_and_names_every_stream_as_a_link(console, lost_batch, page, path):
    _, web_url = console
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(web_url + path.format(batch=lost_batch))
    expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
    if path in ("", "streams", "incident?batch={batch}"):  # pages that list the stream (its own page names it in the heading)
        expect(page.get_by_text(STREAM, exact=True).first).to_be_visible(timeout=30_000)
    page.wait_for_load_state("networkidle")
    fits = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    try:  # a table laid out before its container's width is known is wide for a moment (CI, once)
        page.wait_for_function(fits, timeout=10_000)
    except PlaywrightTimeout:
        widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        raise AssertionError(f"{path or '/'} is {widths[0]} px wide in a {widths[1]} px window: {_widest(page)}")
    names = page.get_by_text(STREAM, exact=True)
    for i in range(names.count()):
        tag = names.nth(i).evaluate("e => e.closest('a') ? 'a' : e.tagName.toLowerCase()")
        assert tag in ("a", "option"), f"{path or '/'}: the stream name in a <{tag}> is not a link"


def _widest(page) -> str:
    """The deepest element whose right edge passes the window, as its tag and first text (to say what overflows)."""
    return page.evaluate("""() => {
        const out = [];
        const walk = (root) => root.querySelectorAll('*').forEach(e => {
            if (e.shadowRoot) walk(e.shadowRoot);
            const r = e.getBoundingClientRect();
            if (r.right > window.innerWidth + 1) out.push(e);
        });
        walk(document);
        const deepest = out.filter(e => !out.some(o => o !== e && e.contains(o)));
        return deepest.slice(0, 3).map(e => `<${e.tagName.toLowerCase()} class="${e.className}">`
            + (e.textContent || '').slice(0, 120)).join(' | ');
    }""")
