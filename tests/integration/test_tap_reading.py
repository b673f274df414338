"""The `$FI` taps read as the connection parses (console.broker.capture._readers_of): in the wire's order,
a 503 status told as one, a reader's failure costing its message only, and nothing after a drain."""

import asyncio
import logging

import nats

from console.broker.capture import Inbound, Subscriptions
from console.broker.connection import flush
from console.collector.grading import Grading
from console.collector.publishers import Publishers
from console.domain.conformance import ClientVerdict
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
        assert subs.backlog() == 0 and tap.stats["in_msgs"] >= len(bodies)
    finally:
        await tap.close()


async def test_grading_keeps_the_wires_order_however_far_the_publish_side_s_task_falls_behind(nats_server, nc):
    """A client that sends 59 messages past its start at a flow of 10 without waiting for an ack (F05). The
    publish side's task holds them while the replies' task hands over every ack, and the grader passes
    twice meanwhile: graded ahead of the messages, those acks would make the client look as if it waited
    (CI, under load: a faulty publisher graded as conforming). The converse, late acks, is a false F05."""
    tap = await nats.connect(nats_server.url)
    subs = Subscriptions()
    grading = Grading(Publishers(None, None), "t", batch_timeout=10, every=1, first_unhanded=subs.first_unhanded)
    gate, handed = asyncio.Event(), []

    async def publish_side(msg: Inbound) -> None:
        await gate.wait()
        grading.fast_message(msg)
        handed.append(msg)

    def reply(msg: Inbound) -> None:
        grading.reply(msg)
        handed.append(msg)

    await subs.follow(tap, "graded.x", publish_side)
    await subs.tap_fast_replies(tap, PREFIX, reply, queued=True)
    await flush(tap)
    try:
        def fi(seq: int, op: int) -> str:
            return f"{PREFIX}.bo.10.ok.{seq}.{op}.$FI"

        await nc.publish("graded.x", b"x", reply=fi(1, 0))
        await nc.publish(fi(1, 0), b'{"type":"ack","seq":0,"msgs":10}')  # the start answered
        for seq in range(2, 61):
            await nc.publish("graded.x", b"x", reply=fi(seq, 1))
        for seq in range(10, 61, 10):
            await nc.publish(fi(seq, 1), b'{"type":"ack","seq":%d,"msgs":10}' % seq)
        await nc.flush()
        await wait_until(lambda: len(handed) == 7, what=_said("every reply handed over", tap, handed))
        assert subs.first_unhanded() is not None
        grading.grade()
        grading.grade()  # two passes while the publish side's task still holds the batch's messages
        gate.set()
        await wait_until(lambda: len(handed) == 7 + 60, what=_said("every message handed over", tap, handed))
        await wait_until(lambda: subs.first_unhanded() is None, what="the publish side's task done")
        told: list = []
        grading.tick(lambda events, _source: told.extend(events), everything=True)  # as the collector stops
        [verdict] = [ClientVerdict.from_json(e.detail) for e in told]
        assert verdict.failing == ["F05"], verdict.results
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
