"""The Canary page in Chromium at 1280 px: before any canary it says how to start one; with a real
`batch-console canary` beside it, each node and kind has its row, well, with its times, and the commit
times are drawn."""

from __future__ import annotations

import signal
import subprocess

import pytest
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from tests.processes import CLI, free_port, wait_http


DRAWN = """() => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.data && m.data.ms && m.data.ms.length > 0) return true;
  return false;
}"""


RANGED = """() => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.data && m.data.ms && m.data.ms.length > 0)
        for (const f of doc.all_models)
          if (f.x_range && f.x_range.start !== null && f.x_range.start !== undefined && !isNaN(f.x_range.start))
            return true;
  return false;
}"""


@pytest.fixture(scope="module")
def canary_web(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("canary")
    with EmbeddedServer(tmp / "nats") as server:
        port = free_port()
        web = subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(tmp)],
                               stdout=open(tmp / "web.log", "w"), stderr=subprocess.STDOUT)
        canary = None
        try:
            wait_http(f"http://127.0.0.1:{port}/", web, tmp / "web.log")

            def start() -> None:
                nonlocal canary
                canary = subprocess.Popen([CLI, "canary", "--server", server.url, "--data-dir", str(tmp), "--every", "1"],
                                          stdout=subprocess.DEVNULL, stderr=open(tmp / "canary.log", "w"))

            yield f"http://127.0.0.1:{port}/", start
        finally:
            for proc in (canary, web):
                if proc is not None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)


def test_before_a_canary_the_page_says_how_and_with_one_each_node_is_shown(canary_web, page, screenshots):
    url, start = canary_web
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(url + "canary")
    expect(page.get_by_text("The event log was not read: no event key")).to_be_visible(timeout=30_000)
    start()  # it makes the event key, as a writer of events does; the page reads the log again on its own
    rows = page.get_by_role("row")
    for kind in ("atomic", "fast"):
        expect(rows.filter(has_text=kind).first).to_contain_text("well", timeout=60_000)
    expect(page.get_by_text("every node well")).to_be_visible()
    expect(page.locator("canvas").first).to_be_visible()
    page.wait_for_function(DRAWN, timeout=30_000)  # the commit times are in the plot's data
    page.screenshot(path=screenshots / "canary.png", full_page=True)
    page.goto(url + "canary")  # opened with results already there: drawn from its first load (it was blank,
    page.wait_for_function(RANGED, timeout=8_000)  # "could not set initial ranges", until a refresh 10 s on)
