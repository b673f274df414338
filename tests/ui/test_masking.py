"""Masking in Chromium against a real console: a second web process with masking rules serves the
shared console's server; a masked field and header never reach the browser (the websocket's frames
and the first answer are read), in Search and in Replay, and a predicate cannot find them out; the
command line masks the same way; a rules file with an error stops the web process with its line."""

import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.processes import CLI, free_port, nats_tool, wait_http

SECRET_FIELD, SECRET_HEADER = "4111-SECRET-1111", "TOKEN-SECRET"
RULES = '[[mask]]\nstreams = ["UI_MASK*"]\nfields = ["card.number"]\nheaders = ["Authorization"]\n'
SEED = f"""
import asyncio, json, nats
from nats.js.api import StreamConfig
async def main():
    nc = await nats.connect("{{url}}")
    await nc.jetstream().add_stream(StreamConfig(name="UI_MASK", subjects=["ui.mask.>"]))
    await nc.jetstream().add_stream(StreamConfig(name="UI_PLAIN", subjects=["ui.plain.>"]))  # no rules apply
    for i in range(3):
        await nc.jetstream().publish("ui.mask.x", json.dumps({{"card": {{"number": "{SECRET_FIELD}"}}, "amount": i}}).encode(),
                                     headers={{"Authorization": "Bearer {SECRET_HEADER}", "kind": "order"}})
    await nc.close()
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def masked_web(console, data_dir, tmp_path_factory):
    nats_url, _ = console
    subprocess.run([sys.executable, "-c", SEED.replace("{url}", nats_url)], check=True, timeout=60)
    rules = tmp_path_factory.mktemp("mask") / "mask.toml"
    rules.write_text(RULES)
    port = free_port()
    log = rules.parent / "web.log"
    web = subprocess.Popen([CLI, "serve", "--server", nats_url, "--port", str(port), "--data-dir", data_dir,
                            "--mask-rules", str(rules)], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    wait_http(url, web, log)
    yield nats_url, url, rules
    web.terminate()
    web.wait(timeout=20)
    nats_tool("delete-stream", nats_url, "UI_PLAIN")  # the shared console's Streams page stays as it was


def watch(page) -> list[str]:
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
    return frames


def test_masked_fields_and_headers_never_reach_the_browser_in_search(masked_web, page):
    _, url, _ = masked_web
    frames = watch(page)
    page.goto(url + "search?stream=UI_MASK&where=payload.amount >= 0")
    expect(page.get_by_text("done: the whole range read")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text="ui.mask.x")).to_have_count(3)
    seen = page.content() + "".join(frames)
    at = seen.find(SECRET_FIELD)
    assert SECRET_FIELD not in seen and SECRET_HEADER not in seen, seen[max(0, at - 300):at + 100]
    assert "***" in seen and "amount" in seen  # masked, not removed: the rest of the payload is there
    page.goto(url + f'search?stream=UI_MASK&where=payload.card.number == "{SECRET_FIELD}"')
    expect(page.get_by_text("done: the whole range read")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("0 matched")).to_be_visible()  # a predicate sees what is shown, nothing more


def test_masked_fields_and_headers_never_reach_the_browser_in_replay(masked_web, page):
    _, url, _ = masked_web
    frames = watch(page)
    page.goto(url + "replay")
    expect(page.get_by_label("stream", exact=True)).to_contain_text("UI_MASK", timeout=30_000)
    page.get_by_label("stream", exact=True).select_option("UI_MASK")
    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("3 message(s)", exact=False)).to_be_visible(timeout=15_000)
    seen = page.content() + "".join(frames)
    assert SECRET_FIELD not in seen and SECRET_HEADER not in seen and "***" in seen


def test_an_answer_that_lands_after_the_stream_was_switched_is_dropped_not_unmasked(masked_web, page):
    """The fetch waits its expiry for messages UI_MASK does not have; the user picks UI_PLAIN meanwhile:
    UI_MASK's messages were masked by UI_PLAIN's rules (none) before, and reached the page in full."""
    _, url, _ = masked_web
    frames = watch(page)
    page.goto(url + "replay?stream=UI_MASK")
    expect(page.get_by_label("stream", exact=True)).to_have_value("UI_MASK", timeout=30_000)
    page.get_by_label("expires (s)").fill("4")
    page.get_by_label("expires (s)").press("Enter")
    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("Fetching")).to_be_visible(timeout=10_000)
    page.get_by_label("stream", exact=True).select_option("UI_PLAIN")
    expect(page.get_by_text("came after another stream was picked")).to_be_visible(timeout=15_000)
    seen = page.content() + "".join(frames)
    assert SECRET_FIELD not in seen and SECRET_HEADER not in seen


def test_the_command_line_masks_the_same_and_a_broken_rules_file_stops_the_web(masked_web, data_dir, tmp_path):
    nats_url, _, rules = masked_web
    done = subprocess.run([CLI, "search", "UI_MASK", "--server", nats_url, "--data-dir", data_dir,
                           "--mask-rules", str(rules)], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()  # 3 messages (or 6: a fixture made again seeds them again)
    assert done.returncode == 0 and len(lines) in (3, 6), done.stdout + done.stderr
    assert all(line.count("***") == 2 for line in lines)
    assert SECRET_FIELD not in done.stdout and SECRET_HEADER not in done.stdout
    for fmt in ("csv", "jsonl", "parquet"):  # and the exports, whatever the format
        out = tmp_path / f"masked.{fmt}"
        exported = subprocess.run([CLI, "search", "UI_MASK", "--server", nats_url, "--data-dir", data_dir,
                                   "--mask-rules", str(rules), "--output", str(out), "--format", fmt],
                                  capture_output=True, text=True, timeout=60)
        assert exported.returncode == 0, exported.stderr
        if fmt == "parquet":  # compressed: read back, not searched as bytes
            import pyarrow.parquet as pq

            written = str(pq.read_table(out).to_pylist()).encode()
        else:
            written = out.read_bytes()
        assert SECRET_FIELD.encode() not in written and SECRET_HEADER.encode() not in written and b"***" in written
    broken = tmp_path / "broken.toml"
    broken.write_text('[[mask]]\nstreams = ["A"]\nfields = ["a..b"]\n')
    refused = subprocess.run([CLI, "serve", "--server", nats_url, "--port", str(free_port()), "--data-dir", data_dir,
                              "--mask-rules", str(broken)], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "line 1" in refused.stdout + refused.stderr
