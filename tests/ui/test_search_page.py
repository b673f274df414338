"""The Search page in Chromium against the real console: the query in the URL runs at once, the
matches link to Replay at their sequence and to their batch replayed, the progress line says how it
ended; a hostile query is refused beside the form and the page stands."""

import re

import pytest
from playwright.sync_api import expect

from tests.processes import children_of_serve, nats_tool, probe
from tests.waits import poll_until


def test_a_query_in_the_url_runs_and_each_match_links_to_replay_and_its_batch(console, page, screenshots):
    nats_url, web_url = console
    probe(nats_url, "atomic", "--count", "6", "--batch-size", "3", "--stream", "UI_SEARCH", "--subject", "ui.search")
    page.goto(web_url + 'search?stream=UI_SEARCH&where="Nats-Batch-Id" in headers&newest_first=true'
                        "&max_matches=4")
    expect(page.get_by_text("stopped at the limit max_matches")).to_be_visible(timeout=30_000)
    rows = page.get_by_role("row").filter(has_text="ui.search")
    expect(rows).to_have_count(4)
    first = rows.first
    expect(first.get_by_role("link", name="6", exact=True)).to_have_attribute("href", "/replay?stream=UI_SEARCH&start_seq=6")
    # a stored batch is a committed one: its link replays it (an Incident had nothing for it)
    expect(first.get_by_role("link").nth(1)).to_have_attribute("href",
                                                                re.compile(r"^/replay\?stream=UI_SEARCH&batch_id=\w+$"))
    page.screenshot(path=screenshots / "search.png", full_page=True)


@pytest.mark.parametrize("query", ['stream=UI_SEARCH&where=open("/etc/passwd")', "stream=UI_SEARCH&where=" + "x" * 5000,
                                   "stream=UI_SEARCH&max_seconds=nan", "stream=../etc&subject=a..b",
                                   "stream=UI_SEARCH&start_seq=-5", "stream=UI_SEARCH&since=%00%1b"])
def test_a_hostile_query_is_refused_beside_the_form(console, page, query):
    _, web_url = console
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    response = page.goto(web_url + "search?" + query)
    assert response.status in (200, 414)
    if response.status == 200:
        expect(page.get_by_role("button", name="Search")).to_be_visible()
    assert dialogs == []


SEED_BIG = """
import asyncio, nats
from nats.js.api import StreamConfig
async def main():
    nc = await nats.connect("{url}")
    await nc.jetstream().add_stream(StreamConfig(name="UI_SEARCH_BIG", subjects=["ui.big.>"]))
    for i in range(200_000):
        await nc.publish("ui.big.x", b'{"n": %d}' % i)
        if i % 5000 == 0:
            await nc.flush()
    await nc.flush()
    while (await nc.jetstream().stream_info("UI_SEARCH_BIG")).state.messages < 200_000:
        await asyncio.sleep(0.1)
    await nc.close()
asyncio.run(main())
"""


def test_progress_shows_while_it_runs_and_cancel_stops_it(console, page):
    import subprocess
    import sys

    nats_url, web_url = console
    subprocess.run([sys.executable, "-c", SEED_BIG.replace("{url}", nats_url)], check=True, timeout=120)
    page.goto(web_url + 'search?stream=UI_SEARCH_BIG&where=text.matches("never")')
    expect(page.get_by_text(re.compile(r"searching: [\d,]+ scanned"))).to_be_visible(timeout=30_000)
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_text(re.compile(r"cancelled: [\d,]+ scanned"))).to_be_visible(timeout=5_000)


HEAVY = ("[" + ",".join(["0"] * 64) + "].exists(x, (" + "+".join(["text"] * 32) + ').contains("z"))')  # ~1 s a message


def test_a_costly_search_stalls_no_one_and_closing_its_tab_stops_it_and_removes_its_consumer(console, browser):
    """Before, the predicate ran on the web's event loop: another user's page waited a minute, and a closed
    tab's search ran on (its consumer kept) until its limit."""
    nats_url, web_url = console
    port = int(web_url.rstrip("/").rsplit(":", 1)[1])
    nats_tool("seed-large", nats_url, "UI_SEARCH_LARGE")
    searcher = browser.new_context().new_page()
    searcher.goto(web_url + "search?stream=UI_SEARCH_LARGE&max_seconds=120&where=" + HEAVY.replace("+", "%2B"))
    expect(searcher.get_by_text(re.compile(r"^searching"))).to_be_visible(timeout=30_000)
    assert nats_tool("consumers", nats_url, "UI_SEARCH_LARGE") == "1"
    assert len(children_of_serve(port, b"console.predicate_worker")) == 1
    other = browser.new_context().new_page()  # another user, while the search runs
    other.goto(web_url + "stream?name=UI_SEARCH_LARGE")  # read from the server by the same web process
    expect(other.get_by_text(re.compile(r"holds 60 messages"))).to_be_visible(timeout=10_000)
    expect(searcher.get_by_text(re.compile(r"^searching"))).to_be_visible()  # still running: it was not waited for
    searcher.context.close()
    # well before its 120 s limit (a bound of 3 s, each look a process of its own, failed once under CI's load)
    poll_until(lambda: nats_tool("consumers", nats_url, "UI_SEARCH_LARGE") == "0", 30,
               "the closed tab's search kept its consumer")
    poll_until(lambda: children_of_serve(port, b"console.predicate_worker") == [], 10, "its predicate worker lives on")
    other.context.close()
    nats_tool("delete-stream", nats_url, "UI_SEARCH_LARGE")
