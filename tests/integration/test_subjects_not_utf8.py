"""A subject that is not UTF-8, which any client may publish: nats-py, decoding it, ends the read loop of
every connection subscribed to it. The console's connections (connection.guarded) read it with U+FFFD in
place of the bytes that are not UTF-8, count it, and go on; readers refuse it as any other malformed input."""


from nats.js.api import StreamConfig

from console.broker.capture import Inbound, Subscriptions
from console.broker.connection import connect, flush, not_utf8
from console.config import ConnectionSettings
from tests.raw_protocol import send_raw
from tests.waits import wait_until


async def test_a_subscription_goes_on_reading_past_a_subject_that_is_not_utf8(nats_server):
    nc = await connect(ConnectionSettings(servers=(nats_server.url,)))
    heard: list[bytes] = []
    tapped: list[Inbound] = []

    async def on_msg(msg) -> None:
        heard.append(msg.data)

    try:
        await nc.subscribe("utf8.*", cb=on_msg)
        await Subscriptions().tap_fast_replies(nc, "_UTF8", tapped.append)
        await flush(nc)
        await send_raw(nats_server.url, b"PUB utf8.\xff\xfe 3\r\nbad\r\n", b"PUB utf8.x utf8.\xc3 5\r\nreply\r\n",
                   b"PUB _UTF8.b\xff.10.ok.2.1.$FI 3\r\nbad\r\n", b"PUB utf8.\xc3\xa9 4\r\nutf8\r\n",
                   b"PUB utf8.after 5\r\nafter\r\n", b"PUB _UTF8.b.10.ok.2.1.$FI 5\r\nafter\r\n")
        await wait_until(lambda: b"after" in heard and len(tapped) == 2, what="the messages after the hostile ones")
        assert heard == [b"bad", b"reply", b"utf8", b"after"]  # each repaired one reaches its subscriber
        assert [m.data for m in tapped] == [b"bad", b"after"] and tapped[0].subject == "_UTF8.b\ufffd.10.ok.2.1.$FI"
        assert not_utf8(nc) == 3 and nc.is_connected
    finally:
        await nc.close()


async def test_an_ordered_consumer_reads_on_past_one(nats_server):
    """The event log's readers use ordered consumers: one that missed a message would start again at it."""
    nc = await connect(ConnectionSettings(servers=(nats_server.url,)))
    js = nc.jetstream()
    read: list[tuple[str, bytes]] = []

    async def on_msg(msg) -> None:
        read.append((msg.subject, msg.data))

    try:
        await js.add_stream(StreamConfig(name="UTF8_JS", subjects=["utf8js.>"]))
        await js.publish("utf8js.first", b"first")
        await send_raw(nats_server.url, b"PUB utf8js.\xff 3\r\nbad\r\n")
        await js.publish("utf8js.last", b"last")
        await js.subscribe("utf8js.>", ordered_consumer=True, cb=on_msg)
        await wait_until(lambda: len(read) >= 3, what="all three, in order")
        assert read == [("utf8js.first", b"first"), ("utf8js.\ufffd", b"bad"), ("utf8js.last", b"last")]
        assert not_utf8(nc) == 1
    finally:
        await nc.close()


async def test_the_collector_counts_them_and_goes_on_tapping(nats_server):
    from console.broker.fast import FastBatch
    from console.collector.collector import Collector
    from console.collector.status import NOT_UTF8_REASON
    from console.config import CollectorSettings
    from console.domain.events import EventKind
    from tests.waits import events_for

    nc = await connect(ConnectionSettings(servers=(nats_server.url,)))
    await nc.jetstream().add_stream(StreamConfig(name="UTF8_FAST", subjects=["utf8fast.>"], allow_batched=True))
    collector = Collector(nc, CollectorSettings(tick_every=0.1))
    await collector.start()
    try:
        await send_raw(nats_server.url, b"PUB _INBOX.\xff.b1.10.ok.2.1.$FI 2\r\n{}\r\n",
                   b"PUB $JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.\xff 2\r\n{}\r\n")
        batch = FastBatch(nc, flow=10)
        for _ in range(5):
            await batch.add("utf8fast.x", b"x")
        await batch.commit_eob()
        await events_for(nc, {batch.batch_id}, lambda es: any(e.kind is EventKind.FAST_COMMITTED for e in es))
        status = await collector.status()
        assert status.rejected.get(NOT_UTF8_REASON, 0) >= 2 and status.connected, status.rejected
    finally:
        await collector.stop()
        await nc.close()
