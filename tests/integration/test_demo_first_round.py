"""The demo's first round is seen: the demo waits until a collector says it is reading before it publishes
(`up --demo` once published round 1 before the collector's taps were in place, and round 1's incomplete,
large, unsupported and gap losses appeared nowhere)."""

from __future__ import annotations

import os
import signal
import subprocess

import nats

from console.broker.eventlog import EventLog
from console.broker.server import EmbeddedServer
from console.config import DataSettings, EventLogSettings, env_name, event_key
from console.domain.events import EventKind
from tests.conftest import TEST_LIMITS
from tests.processes import CLI
from tests.waits import eventually, poll_until

ROUND_ONE = {"timeout", "incomplete", "large", "unsupported"}


async def test_the_demo_waits_for_the_collector_and_its_first_round_is_seen(tmp_path):
    with EmbeddedServer(tmp_path / "nats", batch_limits=TEST_LIMITS) as server:
        data = tmp_path / "data"
        event_key(data_dir=data)  # as `up` makes it before its parts start
        demo_log, collect_log = tmp_path / "demo.log", tmp_path / "collect.log"
        with open(demo_log, "w") as err:
            demo = subprocess.Popen([CLI, "demo", "--server", server.url, "--demo-rounds", "1"], stderr=err,
                                    env={**os.environ, env_name(DataSettings, "data_dir"): str(data)})  # as `up` runs it
        collector = None
        try:
            nc = await nats.connect(server.url)
            poll_until(lambda: "connecting" in demo_log.read_text(), 30, "the demo started")
            assert demo.poll() is None, demo_log.read_text()
            await _none_published(nc)
            with open(collect_log, "w") as err:
                collector = subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", str(data)],
                                         stderr=err)
            assert demo.wait(timeout=180) == 0, demo_log.read_text()[-3000:]
            assert "the collector is reading: the demo starts" in demo_log.read_text()
            assert "failures so far" not in demo_log.read_text(), demo_log.read_text()[-3000:]  # a round cut short
            log = EventLog.over(nc, EventLogSettings(key=event_key(data_dir=data)))

            async def reasons() -> set[str]:
                # read up to the last event now: a 0.3 s idle time cut it short in one CI run under load
                return {e.reason or "" for _, e in await log.read(1)
                        if e.kind is EventKind.ATOMIC_ABANDONED}

            found = await eventually(reasons, lambda r: ROUND_ONE <= r, timeout=60, what="round 1's abandonments")
            assert ROUND_ONE <= found
            await nc.close()
        finally:
            for proc in (demo, collector):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)


async def _none_published(nc) -> None:
    """A few seconds with no collector: the demo has made no stream of its own yet, nor sent a batch."""
    import asyncio

    await asyncio.sleep(3)  # the window in which round 1 used to go out unseen
    names = [s.config.name for s in await nc.jetstream().streams_info()]
    assert not any(n.startswith("DEMO_") for n in names), names
