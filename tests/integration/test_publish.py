"""Publishing from the console against a real nats-server: one message with headers, stored messages again;
each the server's answer, audited, refused by role, read-only mode and the rules of what may be sent."""

from __future__ import annotations

import subprocess

import pytest
from nats.js.api import StreamConfig

from console.commands import PublishMessage, RepublishMessages
from console.config import event_key
from console.domain.audit import Actor
from console.domain.publishing import MAX_PAYLOAD
from console.errors import ReadOnlyError, Refusal
from console.runtime import Runtime
from tests.integration.test_audit import settings_for
from tests.processes import CLI


@pytest.fixture
async def consoles(server, tmp_path):
    event_key(data_dir=tmp_path)
    opened = [await Runtime.open(settings_for(server.url, tmp_path, read_only)) for read_only in (False, True)]
    js = opened[0].nc.jetstream()
    for name in ("PUB_A", "PUB_B"):
        try:
            await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
        except Exception:
            pass  # made by an earlier test of the module
    yield opened
    for runtime in opened:
        await runtime.close()


async def test_one_message_with_headers_is_stored_as_sent_and_its_pubAck_said(consoles):
    console, _ = consoles
    ann = console.actions(Actor("ann"))
    ack = await ann.run(PublishMessage("PUB_A", "pub_a.orders", b'{"n": 1}', (("Nats-Msg-Id", "order-1"),
                                                                                 ("X-Why", "resent by hand"))))
    assert ack.stream == "PUB_A" and not ack.duplicate
    stored = await console.nc.jetstream().get_msg("PUB_A", ack.seq)
    assert stored.data == b'{"n": 1}' and stored.headers["X-Why"] == "resent by hand"
    again = await ann.run(PublishMessage("PUB_A", "pub_a.orders", b'{"n": 1}', (("Nats-Msg-Id", "order-1"),)))
    assert again.duplicate  # the server's word: its duplicate window held it
    trail = await console.audit.read(None)
    said = [(r.action, r.outcome, r.target) for _, r in trail.records if r.action == "message.publish"]
    assert ("message.publish", "accepted", "PUB_A pub_a.orders (8 bytes; headers Nats-Msg-Id,X-Why)") in said
    assert all("n\": 1" not in t for _, _, t in said)  # the payload's size is recorded, never its bytes


@pytest.mark.parametrize("subject, headers, payload, why", [
    ("$JS.API.STREAM.DELETE.PUB_A", (), b"", "server's or a client's own"),
    ("pub_a.*", (), b"", "wildcard"),
    ("pub_a.>", (), b"", "wildcard"),
    ("pub_a.a b", (), b"", "white space"),
    ("pub_a.\x00", (), b"", "printable"),
    ("pub_a." + "x" * 300, (), b"", "subject of 1 to 255"),
    ("pub_b.x", (), b"", "not a subject of stream PUB_A"),
    ("_INBOX.abc", (), b"", "own subject"),
    ("pub_a.x", (("Nats-Batch-Id", "forged"),), b"", "written by the server or the console"),
    ("pub_a.x", (("Batch-Console-Repair-Of", "b1"),), b"", "written by the server or the console"),
    ("pub_a.x", (("X-A", "line\r\nX-Injected: 1"),), b"", "printable"),
    ("pub_a.x", (("X A", "v"),), b"", "header name"),
    ("pub_a.x", tuple((f"X-{i}", "v") for i in range(40)), b"", "at most 32 headers"),
    ("pub_a.x", (), b"p" * (MAX_PAYLOAD + 1), "more than the server takes"),
])
async def test_what_may_not_be_published_is_refused_before_it_is_sent_and_audited(consoles, subject, headers,
                                                                                   payload, why):
    console, _ = consoles
    before = (await console.nc.jetstream().stream_info("PUB_A")).state.last_seq
    with pytest.raises(ValueError, match=why):
        await console.actions(Actor("ann")).run(PublishMessage("PUB_A", subject, payload, headers))
    assert (await console.nc.jetstream().stream_info("PUB_A")).state.last_seq == before
    trail = await console.audit.read(None)
    assert any(r.action == "message.publish" and r.outcome == "refused: invalid" for _, r in trail.records)


async def test_read_only_mode_and_the_roles_refuse_both_and_a_stream_the_server_lacks_is_its_refusal(consoles):
    console, read_only = consoles
    with pytest.raises(ReadOnlyError):
        await read_only.actions(Actor("ann")).run(PublishMessage("PUB_A", "pub_a.x", b"1"))
    viewer = console.actions(Actor("vic"), grants=console.roles.grants("viewer"))
    with pytest.raises(Exception, match="may not message.publish"):
        await viewer.run(PublishMessage("PUB_A", "pub_a.x", b"1"))
    with pytest.raises(Exception, match="may not message.republish"):
        await viewer.run(RepublishMessages("PUB_A", 1, 1, "PUB_B", "pub_b.again"))
    with pytest.raises(Refusal, match="not found"):
        await console.actions(Actor("ann")).run(PublishMessage("PUB_NONE", "pub_none.x", b"1"))


async def test_a_range_is_republished_once_each_and_a_second_time_the_server_drops_as_duplicates(consoles):
    console, _ = consoles
    ann = console.actions(Actor("ann"))
    first = (await ann.run(PublishMessage("PUB_A", "pub_a.r", b"one", (("X-Order", "1"),)))).seq
    last = (await ann.run(PublishMessage("PUB_A", "pub_a.r", b"two", (("X-Order", "2"),)))).seq
    done = await ann.run(RepublishMessages("PUB_A", first, last + 1, "PUB_B", "pub_b.again"))
    assert [(r.seq, bool(r.stored_as), r.problem is None) for r in done] == [
        (first, True, True), (last, True, True), (last + 1, False, False)]  # one past the stream's last: said
    copy = await console.nc.jetstream().get_msg("PUB_B", done[0].stored_as)
    assert (copy.data, copy.headers["X-Order"]) == (b"one", "1")
    again = await ann.run(RepublishMessages("PUB_A", first, last, "PUB_B", "pub_b.again"))
    assert [r.duplicate for r in again] == [True, True]
    with pytest.raises(ValueError, match="1000"):
        await ann.run(RepublishMessages("PUB_A", 1, 5000, "PUB_B", "pub_b.again"))
    with pytest.raises(ValueError, match="not a subject of stream PUB_A"):
        await ann.run(RepublishMessages("PUB_A", first, last, "PUB_A", "pub_b.again"))


def test_the_cli_publishes_with_headers_and_refuses_a_forged_batch_header(server, tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, *args, "--server", server.url, "--data-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)

    made = cli("publish", "PUB_A", "pub_a.cli", "--data", "hello", "--header", "X-From: the cli")
    assert made.returncode == 0 and "message.publish PUB_A pub_a.cli" in made.stdout and "stored as PUB_A seq" in \
        made.stdout, made.stderr
    refused = cli("publish", "PUB_A", "pub_a.cli", "--header", "Nats-Batch-Commit: 1")
    assert refused.returncode != 0 and "written by the server or the console" in refused.stderr
    assert "Traceback" not in refused.stderr
    moved = cli("republish", "PUB_A", "--from", "1", "--to", "1", "--to-stream", "PUB_B", "--to-subject", "pub_b.cli")
    assert moved.returncode == 0 and "1 stored" in moved.stdout, moved.stderr
