import asyncio

import nats
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.eventlog import EventLog
from console.broker.server import EmbeddedServer
from console.collector.collector import Collector
from console.config import CollectorSettings
from tests.conftest import TEST_LIMITS
from tests.waits import collector_ready, events_for, eventually


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
        await abandon(client, "before-restart")
        await events_for(client, {"before-restart"}, bool, timeout=30)

        server.restart()  # same store, same port
        # reconnected, and JetStream answers for the stream again
        await eventually(lambda: client.jetstream().stream_info("RESTART"),
                         lambda _: conn.is_connected and client.is_connected, 20, "the stream coming back", every=0.05)

        await abandon(client, "after-restart")
        [event] = await events_for(client, {"after-restart"}, bool, timeout=30)
        assert event.reason == "timeout"
        assert len(await events_for(client, {"before-restart"}, bool, timeout=30)) == 1  # not duplicated by the restart
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

        async def abandonments():
            return [e for _, e in await log.read(1, idle_timeout=0.1) if e.kind is EventKind.ATOMIC_ABANDONED]

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
        await eventually(abandonments, lambda events: len(events) >= 30, 30, "30 abandonments logged", every=0.01)
        procs[-1].send_signal(signal.SIGKILL)  # mid-burst
        procs[-1].wait()
        await publishing
        start_collector()

        events = await eventually(abandonments, lambda events: len(events) >= len(ids), 60, "every abandonment logged")
        assert sorted(e.batch_id for e in events) == sorted(ids)  # every one, each once
        await client.close()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
        server.stop()
