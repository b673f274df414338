"""The `$FI` taps read as the connection parses (console.broker.capture._readers_of): in the wire's order,
a 503 status told as one, a reader's failure costing its message only, and nothing after a drain."""

import logging

import nats

from console.broker.capture import Inbound, Subscriptions
from tests.raw_protocol import hpub, send_raw
from tests.waits import wait_until

PREFIX = "_TAPREAD"


async def _tapped(url: str, reader) -> tuple[nats.aio.client.Client, Subscriptions]:
    tap = await nats.connect(url)
    subs = Subscriptions()
    await subs.tap_fast_replies(tap, PREFIX, reader)
    await tap.flush()
    return tap, subs


async def test_replies_reach_the_reader_in_the_wires_order_without_nats_py_s_queue(nats_server, nc):
    heard: list[Inbound] = []
    tap, subs = await _tapped(nats_server.url, heard.append)
    try:
        assert getattr(tap, "_console_readers"), "the connection hands its tap's replies over as it reads them"
        bodies = [b'{"type":"ack","seq":%d,"msgs":10}' % (10 * i) for i in range(1, 2001)]
        for i, body in enumerate(bodies):  # both depths: `_INBOX.x` replies have 7 tokens, `_INBOX.<nuid>.x` 8
            await nc.publish(f"{PREFIX}.{'c.' if i % 2 else ''}b1.10.ok.{10 * (i + 1)}.1.$FI", body)
        await nc.flush()
        await wait_until(lambda: len(heard) == len(bodies), what="every reply read")
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
        await wait_until(lambda: len(heard) == 3, what="the two statuses and the empty reply")
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
            try:
                await wait_until(lambda: len(heard) >= 3, what="the replies around the failing one")
            except AssertionError as e:  # what was heard and logged, to tell a lost reply from a late one
                raise AssertionError(f"{e}: heard {heard}, logged {caplog.text[-500:]!r}, "
                                     f"connected {tap.is_connected}, read {tap.stats['in_msgs']}") from None
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
    try:
        await nc.publish(f"{PREFIX}.bd.10.ok.2.1.$FI", b"one")
        await wait_until(lambda: heard == [b"one"], what="the first reply")
        await subs.drain(within=5)
        await nc.publish(f"{PREFIX}.bd.10.ok.3.1.$FI", b"two")
        await nc.publish("plain.subject", b"still read")
        await wait_until(lambda: others == [b"still read"], what="the other subscription's message")
        assert heard == [b"one"]  # the tap's reply came first on the wire: read at once, had it come
    finally:
        await tap.close()
