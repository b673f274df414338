"""A tapping connection's MSG lines read without nats-py's parser (console.broker.wire_in): every message, its
payload and reply exact, in the wire's order beside a nats-py subscription on the same connection, whatever
the sizes, headers, PINGs and bytes that look like protocol inside a payload; any split of the stream."""

import asyncio

import nats

from console.broker.capture import Inbound, Subscriptions
from console.broker.connection import flush, unread
from console.broker.wire_in import MAX_HELD
from tests.raw_protocol import hpub, send_raw
from tests.waits import wait_until


async def _reading(url: str) -> tuple[nats.aio.client.Client, list[Inbound], list, Subscriptions]:
    conn = await nats.connect(url)
    heard: list[Inbound] = []
    subs = Subscriptions()
    await subs.read(conn, "fast.>", heard.append)
    others: list = []

    async def other(msg):
        others.append((msg.subject, msg.reply, msg.data, dict(msg.headers or {})))

    await conn.subscribe("slow.>", cb=other)
    await flush(conn)
    return conn, heard, others, subs


async def test_every_message_reaches_its_reader_or_nats_py_exact_and_in_order(nats_server):
    conn, heard, others, _ = await _reading(nats_server.url)
    try:
        assert getattr(conn._ps, "_console_fast", False), "the tapping connection reads its MSG lines itself"
        sizes = [0, 1, 5, 4096, MAX_HELD - 1, MAX_HELD + 7, 1_000_000]
        forged_framing = b"\r\nMSG fast.fake 1 3\r\nabc\r\nPING\r\n+OK\r\n"  # bytes of a payload, never protocol
        lines, fast, slow = [], [], []
        for i, size in enumerate(sizes + [len(forged_framing)]):
            body = forged_framing if size == len(forged_framing) and i == len(sizes) else bytes([65 + i % 26]) * size
            reply = f"r.{i}" if i % 2 else ""
            lines.append(b"PUB fast.%d %s%d\r\n%s\r\n" % (i, reply.encode() + b" " if reply else b"", len(body), body))
            fast.append((f"fast.{i}", reply or None, body))
            lines.append(b"PUB slow.%d %d\r\n%s\r\n" % (i, len(body), body))
            slow.append((f"slow.{i}", "", body, {}))
            lines.append(hpub(f"fast.h{i}", b"NATS/1.0\r\nK: v\r\n\r\n", b"h%d" % i))
            fast.append((f"fast.h{i}", None, b"h%d" % i))
            lines.append(hpub(f"slow.h{i}", b"NATS/1.0\r\nK: v\r\n\r\n", b"h%d" % i))
            slow.append((f"slow.h{i}", "", b"h%d" % i, {"K": "v"}))
        await send_raw(nats_server.url, *lines)
        await wait_until(lambda: len(heard) == len(fast) and len(others) == len(slow), what="every message")
        assert [(m.subject, m.reply, m.data) for m in heard] == fast
        assert others == slow
        assert [m.arrival for m in heard] == sorted(m.arrival for m in heard)
        assert conn.stats["in_msgs"] >= len(fast) + len(slow)
        await conn.flush()  # a PING answered: the connection reads on
    finally:
        await conn.close()


async def test_any_split_of_the_stream_reads_the_same_and_a_reset_forgets_what_was_held(nats_server):
    """The bytes as the server might cut them into reads, fed to the connection's parser at every split."""
    conn, heard, others, _ = await _reading(nats_server.url)
    try:
        fast_sid = next(sid for sid, sub in conn._subs.items() if sub.subject == "fast.>")
        slow_sid = next(sid for sid, sub in conn._subs.items() if sub.subject == "slow.>")
        stream = (b"MSG fast.a %d 3\r\nabc\r\nMSG fast.b %d r.1 0\r\n\r\nPING\r\nMSG slow.c %d 2\r\nhi\r\n"
                  b"MSG fast.d %d 4\r\n\r\n\r\n\r\n" % (fast_sid, fast_sid, slow_sid, fast_sid))
        for cut in range(len(stream) + 1):
            heard.clear()
            others.clear()
            await conn._ps.parse(stream[:cut])
            await conn._ps.parse(stream[cut:])
            await wait_until(lambda: len(others) == 1, what=f"the other subscription's message, cut at {cut}")
            assert [(m.subject, m.reply, m.data) for m in heard] == [
                ("fast.a", None, b"abc"), ("fast.b", "r.1", b""), ("fast.d", None, b"\r\n\r\n")], cut
            assert others[0][:3] == ("slow.c", "", b"hi")
        heard.clear()
        await conn._ps.parse(b"MSG fast.gone %d 10\r\nhalf" % fast_sid)  # the connection drops here
        conn._ps.reset()
        await conn._ps.parse(b"MSG fast.new %d 2\r\nok\r\n" % fast_sid)
        assert [(m.subject, m.data) for m in heard] == [("fast.new", b"ok")]
        await asyncio.wait_for(conn.flush(), 5)
    finally:
        await conn.close()


async def test_after_nats_py_read_a_header_message_the_next_read_is_this_ones_again(nats_server):
    """A status (HMSG) from a pull request every second would otherwise leave a flood's reads with nats-py: it
    keeps what it began to gather, and under a flood its buffer is never empty."""
    conn, heard, _, _ = await _reading(nats_server.url)
    try:
        fast_sid = next(sid for sid, sub in conn._subs.items() if sub.subject == "fast.>")
        through_nats_py = []
        process_msg = conn._process_msg

        async def counted(sid, subject, reply, data, headers):
            if sid == fast_sid:
                through_nats_py.append(subject)
            await process_msg(sid, subject, reply, data, headers)

        conn._process_msg = counted
        header = b"NATS/1.0 408 Request Timeout\r\n\r\n"
        first = b"HMSG fast.status %d %d %d\r\n%s\r\n" % (fast_sid, len(header), len(header), header)
        flood = b"".join(b"MSG fast.%d %d 2\r\nok\r\n" % (i, fast_sid) for i in range(100))
        await conn._ps.parse(first + flood[:-7])  # nats-py takes the status and all after it, and holds a part
        await conn._ps.parse(flood[-7:] + flood)  # read here again, from the part it held
        assert [m.subject for m in heard] == ["fast.status"] + [f"fast.{i}" for i in range(100)] * 2
        assert len(through_nats_py) == 100  # the status and the first read's messages (its last one held)
    finally:
        await conn.close()


async def test_what_the_kernel_holds_unread_is_told_for_a_connection_through_the_seam(nats_server):
    """The collector's `behind` rests on it (its priority taken back): asyncio hands out a TransportSocket."""
    nc = await nats.connect(nats_server.url)
    try:
        told = unread(nc)
        assert told is not None and told[0] >= 0 and told[1] > 0
    finally:
        await nc.close()
