import subprocess
import sys

from playwright.sync_api import expect

from tests.processes import probe
from tests.waits import poll_until



def test_an_abandoned_batch_appears_in_the_live_table(console, page, screenshots):
    nats_url, web_url = console
    page.goto(web_url)
    expect(page.get_by_text("Lost batches, live")).to_be_visible(timeout=30_000)
    report = probe(nats_url, "atomic", "--count", "4", "--batch-size", "2", "--abandon", "--stream", "UI_LIVE", "--subject", "ui.live")
    batch_id = report["abandoned_batch"]
    expect(page.get_by_text(batch_id)).to_be_visible(timeout=30_000)  # the server abandons it after 1 s
    expect(page.get_by_text("collector alive", exact=True)).to_be_visible(timeout=30_000)
    page.screenshot(path=screenshots / "live.png", full_page=True)
    expect(page.get_by_label("only the losses of the domain")).to_be_hidden()  # no leaf's loss here: no field
    page.goto(web_url + "?domain=leaf1")  # a leaf's domain from the URL: none of this server's losses is its
    expect(page.get_by_text("the losses of domain leaf1 alone")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text=batch_id)).to_have_count(0)
    for hostile in ("a.b", "leaf%00", "x" * 65, "%3Cb%3Ex%3C/b%3E"):  # left out: every loss shown, the page up
        page.goto(web_url + f"?domain={hostile}")
        expect(page.get_by_role("row").filter(has_text=batch_id)).to_be_visible(timeout=30_000)
    page.goto(web_url + "?domain=leaf1")
    page.get_by_label("only the losses of the domain").fill("a.b")  # typed: said, and every loss shown
    page.get_by_label("only the losses of the domain").press("Enter")
    expect(page.get_by_text("Not a domain:")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text=batch_id)).to_be_visible()


def test_a_long_status_line_wraps_inside_1280_pixels(console, browser):
    """On a loaded host the status line names firing alerts, skipped records and a starved collector at once:
    it wraps rather than widening the page past the window, in the server's first copy and the live page."""
    _, web_url = console
    long_line = "e => { e.textContent = Array(40).fill('collector starved of CPU 12x (host saturated)').join(' · ') }"
    for copy, scripts in (("the server's first copy", False), ("the live page", True)):
        context = browser.new_context(java_script_enabled=scripts, viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(web_url)
        if scripts:
            expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
        status = page.locator("pre").filter(has_text="collector")
        expect(status).to_be_visible(timeout=30_000)
        status.evaluate(long_line)
        widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        context.close()
        assert widths[0] <= widths[1], f"{copy} is {widths[0]} px wide in a {widths[1]} px window"


def test_a_fast_batch_ended_by_a_gap_appears_with_its_reason(console, page):
    nats_url, web_url = console
    page.goto(web_url)
    report = probe(nats_url, "fast", "--count", "50", "--flow", "5", "--skip-seq", "20", "--gap-mode", "fail",
                   "--stream", "UI_FAST", "--subject", "ui.fast")
    assert report["gaps"] == [{"first_lost_seq": 20, "seq": 21, "lost": 1}]
    row = page.get_by_role("row").filter(has_text=report["batch_ids"][0])
    cells = row.get_by_role("gridcell")  # time, stream, batch, reason, kind, publisher, investigate
    expect(cells.nth(3)).to_have_text("gap", timeout=30_000)
    expect(cells.nth(4)).to_have_text("fast")
    expect(cells.nth(1)).to_have_text("UI_FAST")


HOSTILE_PUBLISHER = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    headers = {"Nats-Batch-Id": sys.argv[2], "Nats-Batch-Sequence": "1"}
    reply = await nc.request("ui.xss", b"x", timeout=5, headers=headers)  # staged, then left to time out
    print(repr(reply.data))
    await nc.close()
asyncio.run(main())
"""


def test_markup_in_a_batch_id_shows_as_text_and_runs_nothing(console, page):
    """A publisher names its batch with markup (the server accepts any header value as an atomic batch
    id); the advisory brings that name to the page."""
    import sys

    nats_url, web_url = console
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", "UI_XSS", "--subject", "ui.xss")
    evil = "<img src=x onerror=alert(1)>"
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(web_url)
    staged = subprocess.run([sys.executable, "-c", HOSTILE_PUBLISHER, nats_url, evil], capture_output=True, text=True, timeout=60)
    assert staged.stdout.strip() == "b''", staged.stderr
    expect(page.get_by_text(evil)).to_be_visible(timeout=30_000)
    assert dialogs == []
    assert page.locator("img[src='x']").count() == 0


def test_the_first_answer_holds_the_page_escaped_and_a_browser_without_scripts_shows_it(console, browser):
    """The server's first answer carries what the page shows (painted before Bokeh's and Panel's scripts
    run), built from the same wire data as the live page, so it is escaped the same way."""
    import urllib.request

    nats_url, web_url = console
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", "UI_XSS", "--subject", "ui.xss")
    evil = "<img src=x onerror=alert(2)>"
    staged = subprocess.run([sys.executable, "-c", HOSTILE_PUBLISHER, nats_url, evil], capture_output=True,
                            text=True, timeout=60)
    assert staged.stdout.strip() == "b''", staged.stderr
    escaped = "&lt;img src=x onerror=alert(2)&gt;"

    def first_answer() -> str | None:
        body = urllib.request.urlopen(web_url, timeout=10).read().decode()
        return body if escaped in body else None

    first = poll_until(first_answer, 60, "the abandonment did not reach the web process's first answer")
    preview = first[first.index('id="bc-preview"'):first.index("<script", first.index('id="bc-preview"'))]
    assert escaped in preview and evil not in first
    scriptless = browser.new_context(java_script_enabled=False)
    page = scriptless.new_page()
    page.goto(web_url)
    row = page.get_by_role("row").filter(has_text=evil)
    expect(row).to_be_visible()
    expect(row).to_contain_text("UI_XSS")
    assert page.locator("img[src='x']").count() == 0
    scriptless.close()


def test_the_live_page_replaces_the_first_answer_once_drawn(console, page):
    nats_url, web_url = console
    page.goto(web_url)
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
    expect(page.get_by_role("button", name="switch to dark theme")).to_be_visible()  # the frame's live controls
    expect(page.get_by_text("Lost batches, live")).to_have_count(1)  # one page, not the preview beside it


# Each page's first answer, and what in it is the page's own content, before any script runs.
FIRST_ANSWERS = {
    "streams": "Streams",
    "replay": '<button type="button" disabled="" aria-hidden="true">Fetch</button>',  # a form: drawn disabled until the page works
    "history": "abandoned batches",
    "incident": '<button type="button" disabled="" aria-hidden="true">Investigate</button>',
    "alerts": "Rules",
    "checks": "Checks",
    "search": '<button type="button" disabled="" aria-hidden="true">Search</button>',
    "conformance": ("graded", "No verdicts yet"),  # the process's last read, from its start on
    "probe": '<button type="button" disabled="" aria-hidden="true">Publish probe</button>',
    "audit": ("Chain intact", "CHAIN BROKEN"),
}


def test_every_pages_first_answer_holds_its_content_before_any_script_runs(console):
    import urllib.request

    _, web_url = console

    def preview(path: str) -> str:
        body = urllib.request.urlopen(web_url + path, timeout=10).read().decode()
        start = body.index('id="bc-preview"')
        return body[start:body.index("<script", start)]

    for path, wanted in FIRST_ANSWERS.items():
        texts = wanted if isinstance(wanted, tuple) else (wanted,)
        poll_until(lambda: any(t in preview(path) for t in texts), 30,
                   lambda: f"/{path}: none of {texts} in its first answer:\n{preview(path)[:3000]}")
    assert "Reading the audit trail" not in preview("audit")
