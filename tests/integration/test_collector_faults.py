import asyncio

import nats
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.eventlog import EventLog
from console.broker.server import EmbeddedServer
from console.collector.collector import Collector, CollectorSettings
from tests.conftest import TEST_LIMITS
from tests.waits import collector_ready


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


async def test_collector_killed_mid_burst_loses_and_duplicates_nothing(tmp_path):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from console.domain.events import EventKind
    from console.errors import BatchIncompleteError

    cli = [str(Path(sys.executable).parent / "batch-console"), "collect", "--batch-timeout", "1"]
    server = EmbeddedServer(tmp_path / "nats", batch_limits=TEST_LIMITS).start()
    procs = []

    def start_collector():
        err = open(tmp_path / f"collect{len(procs)}.log", "w")
        procs.append(subprocess.Popen(cli + ["--server", server.url, "--data-dir", str(tmp_path)], stderr=err))

    try:
        client = await nats.connect(server.url)
        js = client.jetstream()
        await js.add_stream(StreamConfig(name="BURST", subjects=["burst.>"], allow_atomic=True))
        log = EventLog(js)
        start_collector()
        await collector_ready(js, procs[-1])
        deadline = asyncio.get_running_loop().time() + 30

        ids = [f"burst-{i}" for i in range(300)]

        async def burst():
            for batch_id in ids:  # each is abandoned at once as incomplete (a gap)
                batch = AtomicBatch(client, batch_id=batch_id)
                await batch.add("burst.x", b"1")
                batch.skip_seq()
                try:
                    await batch.commit("burst.x", b"3")
                except BatchIncompleteError:
                    pass

        publishing = asyncio.create_task(burst())
        while len([e for _, e in await log.read(1, idle_timeout=0.1) if e.kind is EventKind.ATOMIC_ABANDONED]) < 30:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        procs[-1].send_signal(signal.SIGKILL)  # mid-burst
        procs[-1].wait()
        await publishing
        start_collector()

        while True:
            events = [e for _, e in await log.read(1, idle_timeout=0.2) if e.kind is EventKind.ATOMIC_ABANDONED]
            if len(events) >= len(ids):
                break
            assert asyncio.get_running_loop().time() < deadline + 30, f"{len(events)} of {len(ids)} stored"
            await asyncio.sleep(0.2)
        assert sorted(e.batch_id for e in events) == sorted(ids)  # every one, each once
        await client.close()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
        server.stop()
