"""Replay in Chromium of a Protobuf stream through a decoders file (a real protoc's descriptor set), with
a masking rule on a decoded field: each message shows its decoded fields first and its raw bytes on
request; a message that does not decode is shown raw with why, and counted; the masked card number never
reaches the browser (the websocket's frames are read), as decoded or as raw bytes."""

from __future__ import annotations

import subprocess

import nats
import pytest
from nats.js.api import StreamConfig
from playwright.sync_api import expect

from console.broker.server import EmbeddedServer
from tests.decoders.orders import as_protobuf, descriptor_set, order, protobuf_class
from tests.fleet import run_apart
from tests.processes import CLI, free_port, wait_http
from tests.ui.test_masking import watch


@pytest.fixture(scope="module")
def decoded_web(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay-decoded")
    binpb = descriptor_set(tmp)
    (tmp / "decoders.toml").write_text(f'[[decoder]]\nstreams = ["UI_PB*"]\nencoding = "protobuf"\n'
                                       f'descriptor_set = "{binpb.name}"\nmessage = "shop.v1.Order"\n')
    (tmp / "mask.toml").write_text('[[mask]]\nstreams = ["UI_PB_MASKED"]\nfields = ["card.number"]\n')
    cls = protobuf_class(binpb)
    with EmbeddedServer(tmp / "nats") as server:
        async def seed() -> None:
            nc = await nats.connect(server.url)
            for name in ("UI_PB", "UI_PB_MASKED"):
                await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
                for i in (1, 2):
                    await nc.jetstream().publish(f"{name.lower()}.x", as_protobuf(cls, order(i)))
                await nc.jetstream().publish(f"{name.lower()}.x", b"\x0a\x05ab")  # truncated
            await nc.close()

        run_apart(seed())
        port = free_port()
        web = subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(tmp),
                                "--decoders", str(tmp / "decoders.toml"), "--mask-rules", str(tmp / "mask.toml")],
                               stdout=open(tmp / "web.log", "w"), stderr=subprocess.STDOUT)
        try:
            wait_http(f"http://127.0.0.1:{port}/", web, tmp / "web.log")
            yield f"http://127.0.0.1:{port}/"
        finally:
            web.terminate()
            web.wait(timeout=20)


def fetched(page, url: str, stream: str) -> None:
    page.goto(url + "replay")
    page.get_by_label("stream", exact=True).select_option(stream)
    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("3 message(s)")).to_be_visible(timeout=30_000)


def test_each_message_shows_its_decoded_fields_and_one_that_does_not_decode_says_why(decoded_web, page, screenshots):
    fetched(page, decoded_web, "UI_PB")
    expect(page.get_by_text("payload: protobuf shop.v1.Order")).to_have_count(2)
    expect(page.get_by_text('"city": "Berlin"').first).to_be_visible()
    expect(page.get_by_text('"status": "SHIPPED"').first).to_be_visible()  # an enum by its name
    expect(page.get_by_text("payload not decoded as protobuf shop.v1.Order: not protobuf")).to_be_visible()
    expect(page.get_by_text("1 not decoded (shown raw, with why)")).to_be_visible()
    page.get_by_text("raw (").first.click()  # the raw bytes, on request
    expect(page.get_by_text("0a 02 6f 31").first).to_be_visible()  # id = "o1", as the wire has it
    page.screenshot(path=screenshots / "replay-decoded.png", full_page=True)


def test_a_masked_decoded_field_never_reaches_the_browser(decoded_web, page):
    frames = watch(page)
    fetched(page, decoded_web, "UI_PB_MASKED")
    expect(page.get_by_text('"number": "***"').first).to_be_visible()
    expect(page.get_by_text("payload: json").first).to_be_visible()  # given out as the masked message in JSON
    content = page.content() + "".join(frames)
    assert "4111-0001" not in content and "4111-0002" not in content
    assert "34 31 31 31" not in content  # nor as raw bytes ("4111" in hex)


def test_the_stream_page_says_what_decodes_its_messages(decoded_web, page):
    page.goto(decoded_web + "stream?name=UI_PB")
    expect(page.get_by_text("Payloads decoded as: protobuf shop.v1.Order — decoders.toml line 1")).to_be_visible(
        timeout=30_000)
    page.goto(decoded_web + "stream?name=NOT_DECODED")
    expect(page.get_by_text("## Stream NOT_DECODED").or_(page.get_by_role("heading", name="Stream NOT_DECODED"))) \
        .to_be_visible(timeout=30_000)
    expect(page.get_by_text("Payloads decoded as")).to_have_count(0)
