"""The batch publishers' own path onto nats-py's buffer (console.broker.wire_out) sends what nats-py's
publish sends: a subscriber on a real server receives the same subject, reply, headers and payload
from both, for awkward payloads and subjects; what nats-py refuses is refused the same way; and with
the installed nats-py the direct path is the one taken (an upgrade that moves its fields is seen here)."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest

from console.broker.connection import flush
from console.broker.wire_out import AtomicOutgoing, FastOutgoing, HeadedOutgoing

PAYLOADS = [b"", b"x", b"\r\nPUB evil 1\r\n", b"\x00" * 300, bytes(range(256)) * 40, "é€".encode()]
SUBJECTS = ["wire.a", "wire.é", "wire.a.b.c.d.e.f.g.h.i.j.k." + "x" * 200]


async def received(nc, send) -> list[tuple]:
    got: list[tuple] = []
    done = asyncio.Event()

    async def on(msg) -> None:
        got.append((msg.subject, msg.reply, dict(msg.headers or {}), msg.data))
        if len(got) == len(PAYLOADS) * len(SUBJECTS):
            done.set()

    sub = await nc.subscribe("wire.>", cb=on)
    await flush(nc)
    for subject in SUBJECTS:
        for seq, payload in enumerate(PAYLOADS, start=2):
            await send(subject, payload, seq)
    await asyncio.wait_for(done.wait(), 10)
    await sub.unsubscribe()
    return got


# The event log's headers: an id, a signature, and values nats-py would rewrite (white space about them, a
# line break inside, an empty key), which go through it
HEADERS = [{"Nats-Msg-Id": "fi.b1.started", "Batch-Console-Signature": "ab" * 32}, {"Nats-Msg-Id": " padded "},
           {"Nats-Msg-Id": "a\r\nPUB evil 1"}, {"": "x", "K": "é€"}, {"Nats-Msg-Id": ""}, {}]


@pytest.mark.parametrize("kind", ["fast", "atomic", "headed"])
async def test_a_subscriber_receives_the_same_messages_by_either_path(nc, kind):
    def outgoing(direct: bool):
        out = FastOutgoing(nc, "_INBOX.abc.batch1.500.fail.") if kind == "fast" else AtomicOutgoing(nc, "batch1") \
            if kind == "atomic" else HeadedOutgoing(nc)
        assert out.direct  # the installed nats-py has the fields the direct path writes
        out.direct = direct
        if kind == "fast":
            return lambda subject, payload, seq: out.send(subject, payload, seq, 1)
        if kind == "headed":
            return lambda subject, payload, seq: out.send(subject, payload, f"_INBOX.log.{seq}",
                                                          HEADERS[seq % len(HEADERS)])
        return lambda subject, payload, seq: out.send(
            subject, payload, seq, {"Nats-Batch-Id": "batch1", "Nats-Batch-Sequence": str(seq)})

    before = dict(nc.stats)
    direct = await received(nc, outgoing(True))
    sent = nc.stats["out_msgs"] - before["out_msgs"]
    through_nats_py = await received(nc, outgoing(False))
    assert direct == through_nats_py and sent == len(direct)
    assert direct[2][3] == b"\r\nPUB evil 1\r\n"  # a payload is bytes, never protocol


async def test_what_nats_py_refuses_is_refused_the_same_way(nc):
    fast, atomic, headed = FastOutgoing(nc, "_INBOX.abc.b.500.fail."), AtomicOutgoing(nc, "b"), HeadedOutgoing(nc)
    for subject in ("", "wire. a", "wire.a\r\nPUB x 1", "wire.a\tb"):
        with pytest.raises(nats.errors.BadSubjectError):
            await fast.send(subject, b"x", 2)
        with pytest.raises(nats.errors.BadSubjectError):
            await atomic.send(subject, b"x", 2, {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "2"})
        with pytest.raises(nats.errors.BadSubjectError):
            await headed.send(subject, b"x", "_INBOX.r", {"Nats-Msg-Id": "i"})
        with pytest.raises(nats.errors.BadSubjectError):  # a reply subject too
            await headed.send("wire.a", b"x", subject or " ", {"Nats-Msg-Id": "i"})
    with pytest.raises(nats.errors.BadHeaderError):
        await headed.send("wire.a", b"x", "_INBOX.r", {"Bad Key": "v"})
    too_big = b"x" * (nc.max_payload + 1)
    with pytest.raises(nats.errors.MaxPayloadError):
        await fast.send("wire.a", too_big, 2)
    with pytest.raises(nats.errors.MaxPayloadError):
        await atomic.send("wire.a", too_big, 2, {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "2"})
    with pytest.raises(nats.errors.MaxPayloadError):
        await headed.send("wire.a", too_big, "_INBOX.r", {"Nats-Msg-Id": "i"})
