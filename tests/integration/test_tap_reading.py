"""The `$FI` taps read as the connection parses (console.broker.capture._readers_of): in the wire's order,
a 503 status told as one, a reader's failure costing its message only, and nothing after a drain."""

import asyncio
import logging

import nats

from console.broker.capture import Inbound, Subscriptions
from console.broker.connection import flush
from tests.raw_protocol import hpub, send_raw
from tests.waits import wait_until

PREFIX = "_TAPREAD"


async def _tapped(url: str, reader) -> tuple[nats.aio.client.Client, Subscriptions]:
    tap = await nats.connect(url)
    subs = Subscriptions()
    await subs.tap_fast_replies(tap, PREFIX, reader)
    await flush(tap)  # nats-py's own flush can be answered before the server has the SUBs
    return tap, subs


def _said(what: str, tap, heard):
    """What a wait on the tap says when it fails: what it heard, and whether its connection still reads (a
    lost reply, a late one, or a read loop that ended: nats-py logs and stops)."""
    def state() -> str:
        task = tap._reading_task
        ended = task is not None and task.done()
        return (f"{what} (heard {list(heard)[:10]}, connected {tap.is_connected}, read {tap.stats['in_msgs']}, "
                f"read loop ended {ended}{f' with {task.exception()!r}' if ended and not task.cancelled() else ''})")
    return state


async def test_replies_reach_the_reader_in_the_wires_order_without_nats_py_s_queue(nats_server, nc):
    heard: list[Inbound] = []
    tap, subs = await _tapped(nats_server.url, heard.append)
    try:
        assert getattr(tap, "_console_readers"), "the connection hands its tap's replies over as it reads them"
        bodies = [b'{"type":"ack","seq":%d,"msgs":10}' % (10 * i) for i in range(1, 2001)]
        for i, body in enumerate(bodies):  # both depths: `_INBOX.x` replies have 7 tokens, `_INBOX.<nuid>.x` 8
            await nc.publish(f"{PREFIX}.{'c.' if i % 2 else ''}b1.10.ok.{10 * (i + 1)}.1.$FI", body)
        await nc.flush()
        await wait_until(lambda: len(heard) == len(bodies), what=_said("every reply read", tap, heard))
        assert [m.data for m in heard] == bodies
        assert [m.arrival for m in heard] == sorted(m.arrival for m in heard) and heard[0].arrival > 0
        assert heard[1].subject == f"{PREFIX}.c.b1.10.ok.20.1.$FI" and heard[0].reply is None
        assert not any(m.no_responders for m in heard)
        assert sum(sub.pending_msgs for sub in subs._subs) == 0 and tap.stats["in_msgs"] >= len(bodies)
    finally:
        await tap.close()


async def test_a_503_status_on_a_reply_is_told_as_no_responders(nats_server, nc):
    """The server sends its own 503 to the publisher alone, so what a tap hears with one was written by a
    client: read as the server's would be, for the tracker to weigh (it counts only a tracked batch's)."""
    heard: list[Inbound] = []
    tap, _ = await _tapped(nats_server.url, heard.append)
    try:
        await send_raw(nats_server.url, hpub(f"{PREFIX}.b503.10.ok.2.1.$FI", b"NATS/1.0 503\r\n\r\n"))
        await send_raw(nats_server.url, hpub(f"{PREFIX}.b503.10.ok.3.1.$FI", b"NATS/1.0 503\r\n\r\n", b"body"))
        await nc.publish(f"{PREFIX}.b503.10.ok.4.1.$FI", b"")  # an empty body without a status: not a 503
        await wait_until(lambda: len(heard) == 3, what=_said("the two statuses and the empty reply", tap, heard))
        statuses = {m.subject.split(".")[-3]: m.no_responders for m in heard}
        assert statuses == {"2": True, "3": False, "4": False}  # a 503 with a body is no "no responders"
        assert dict(heard[0].headers).get("Status") == "503"
    finally:
        await tap.close()


async def test_a_reader_that_fails_costs_its_message_not_the_connection(nats_server, nc, caplog):
    heard: list[bytes] = []

    def reader(msg: Inbound) -> None:
        if msg.data == b"boom":
            raise RuntimeError("a reader's bug")
        heard.append(msg.data)

    tap, _ = await _tapped(nats_server.url, reader)
    try:
        with caplog.at_level(logging.ERROR, logger="console.broker.capture"):
            for body in (b"before", b"boom", b"after"):
                await nc.publish(f"{PREFIX}.bf.10.ok.2.1.$FI", body)
            await nc.publish(f"{PREFIX}.bf.10.ok.2.1.$FI", b"\xff\xfe not utf-8 either")
            await nc.flush()
            await wait_until(lambda: len(heard) >= 3, what=_said("the replies around the failing one", tap, heard))
        assert heard == [b"before", b"after", b"\xff\xfe not utf-8 either"]
        assert tap.is_connected and "a reader failed" in caplog.text
    finally:
        await tap.close()


async def test_after_a_drain_the_reader_hears_nothing_and_other_subscriptions_go_on(nats_server, nc):
    heard: list[bytes] = []
    tap, subs = await _tapped(nats_server.url, lambda m: heard.append(m.data))
    others: list[bytes] = []

    async def other(msg) -> None:
        others.append(msg.data)

    await tap.subscribe("plain.subject", cb=other)
    await flush(tap)
    try:
        await nc.publish(f"{PREFIX}.bd.10.ok.2.1.$FI", b"one")
        await wait_until(lambda: heard == [b"one"], what=_said("the first reply", tap, heard))
        await subs.drain(within=5)
        await nc.publish(f"{PREFIX}.bd.10.ok.3.1.$FI", b"two")
        await nc.publish("plain.subject", b"still read")
        await wait_until(lambda: others == [b"still read"],
                         what=_said("the other subscription's message", tap, others))
        assert heard == [b"one"]  # the tap's reply came first on the wire: read at once, had it come
    finally:
        await tap.close()


async def test_a_flush_says_the_server_has_the_subscriptions_made_before_it(nats_server):
    """nats-py writes a flush's PING straight to its socket while a SUB just made still waits for its
    flusher task: the server can answer the PING before it has read the SUB. The console's flush writes
    what nats-py holds first. Seen here on the wire, through a relay that keeps what the client sent."""
    host, port = nats_server.url.removeprefix("nats://").rsplit(":", 1)
    sent = bytearray()

    async def pipe(reader, writer, keep: bool) -> None:
        while data := await reader.read(65536):
            if keep:
                sent.extend(data)
            writer.write(data)
            await writer.drain()
        writer.close()

    async def relay(client_reader, client_writer) -> None:
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(client_reader, server_writer, True), pipe(server_reader, client_writer, False),
                             return_exceptions=True)

    proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
    conn = await nats.connect(f"nats://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
    try:
        for i in range(20):
            await conn.subscribe(f"in.place.{i}")
            await flush(conn)
            last_sub, last_ping = sent.rfind(b"SUB in.place.%d " % i), sent.rfind(b"PING\r\n")
            assert 0 <= last_sub < last_ping, f"SUB {i} after the flush's PING: {bytes(sent[-200:])!r}"
    finally:
        await conn.close()
        proxy.close()
