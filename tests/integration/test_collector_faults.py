import asyncio

import nats
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.eventlog import EventLog
from console.broker.server import EmbeddedServer
from console.collector.collector import Collector, CollectorSettings
from tests.conftest import TEST_LIMITS


async def wait_for_batch(log, batch_id, timeout=30.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            found = [e for _, e in await log.read(1, idle_timeout=0.2) if e.batch_id == batch_id]
        except (nats.errors.Error, nats.js.errors.Error):
            found = []
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"no event for {batch_id}"
        await asyncio.sleep(0.2)


async def abandon(nc, batch_id):
    batch = AtomicBatch(nc, batch_id=batch_id)
    await batch.add("restart.x", b"x")
    batch.discard()


async def test_collector_goes_on_after_the_server_restarts(tmp_path):
    server = EmbeddedServer(tmp_path, batch_limits=TEST_LIMITS).start()
    try:
        conn = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        client = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        collector = Collector(conn, CollectorSettings(batch_timeout=1, tick_every=0.1))
        await collector.start()
        await client.jetstream().add_stream(StreamConfig(name="RESTART", subjects=["restart.>"], allow_atomic=True))
        log = EventLog(client.jetstream())

        await abandon(client, "before-restart")
        await wait_for_batch(log, "before-restart")

        server.restart()  # same store, same port
        deadline = asyncio.get_running_loop().time() + 20
        while True:  # reconnected, and JetStream answers for the stream again
            try:
                if conn.is_connected and client.is_connected:
                    await client.jetstream().stream_info("RESTART")
                    break
            except (nats.errors.Error, nats.js.errors.Error):
                pass
            assert asyncio.get_running_loop().time() < deadline, "stream did not come back"
            await asyncio.sleep(0.05)

        await abandon(client, "after-restart")
        [event] = await wait_for_batch(log, "after-restart")
        assert event.reason == "timeout"
        assert len(await wait_for_batch(log, "before-restart")) == 1  # not duplicated by the restart
        await collector.stop()
        await conn.close()
        await client.close()
    finally:
        server.stop()
