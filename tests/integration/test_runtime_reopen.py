"""A connection the server closes (here: a subject past its control-line limit) is opened again by the
runtime, and Live follows the event log on the new one."""

from datetime import datetime, timezone

import pytest

from console.broker.eventlog import EventLog
from console.config import event_key, load
from console.domain.events import BatchEvent, EventKind
from console.errors import InvalidNameError
from console.runtime import Runtime
from tests.waits import eventually, wait_until


async def test_a_connection_the_server_closed_is_opened_again_and_live_follows(server, tmp_path):
    settings = load(environ={"BATCH_CONSOLE_SERVER": server.url, "BATCH_CONSOLE_DATA_DIR": str(tmp_path)})
    event_key(data_dir=tmp_path)  # the collector's, as the web finds it beside one
    runtime = await Runtime.open(settings)
    try:
        live = runtime.live
        log = EventLog(runtime.nc.jetstream(), runtime.event_log)
        await log.ensure()
        runtime.keep_open()
        await runtime.nc.publish("x" * 5000, b"")  # the server answers with -ERR and closes the connection
        await wait_until(lambda: live.connection.startswith("closed"), timeout=10, what="the server closed it")
        await wait_until(lambda: live.connection == "connected", timeout=30, what="the runtime opened it again")
        log = EventLog(runtime.nc.jetstream(), runtime.event_log)  # the old connection is closed for good
        await log.append([BatchEvent("after-reopen", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc),
                                     "REOPEN", "after-reopen", reason="timeout")])
        await wait_until(lambda: live.model.find_lost("after-reopen") is not None, timeout=15,
                         what="Live follows on the new connection")
        assert (await runtime.admin.streams()) is not None  # the pages' admin works on the new one
    finally:
        await runtime.close()


@pytest.mark.parametrize("call", ["stream", "consumers", "reader", "replay_batch"])
async def test_a_name_the_server_would_refuse_is_refused_before_anything_is_sent(server, tmp_path, call):
    runtime = await Runtime.open(load(environ={"BATCH_CONSOLE_SERVER": server.url, "BATCH_CONSOLE_DATA_DIR": str(tmp_path)}))
    try:
        long = "S" * 5000
        with pytest.raises(InvalidNameError):
            if call == "reader":
                runtime.admin.reader("ORDERS", "bad consumer\r\nPUB x 1")
            elif call == "replay_batch":
                await runtime.admin.replay_batch("ORDERS", "b" * 65)
            else:
                await getattr(runtime.admin, call)(long)
        assert runtime.nc.is_connected and (await eventually(runtime.admin.streams, until=lambda s: s is not None)) is not None
    finally:
        await runtime.close()
