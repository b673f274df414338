"""A server stopped outside the console (its lame duck signal, as an upgrade script sends it) while an
atomic batch is open on a stream it leads: the collector hears the stop notice through the system
account, the batch's loss is in the ledger, and `check` says BATCH_034, naming the node."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.cluster import EmbeddedCluster
from console.collector.atomic_watch import NEW_STREAM
from tests.conftest import CLUSTER_LIMITS
from tests.integration.test_maintain import _lead
from tests.processes import CLI, wait_collecting
from tests.supercluster import ACCOUNTS
from tests.waits import eventually, poll_until

pytestmark = pytest.mark.cluster
APP = ["--user", "app", "--password", "app-secret"]
SYSTEM = ["--system-user", "sys", "--system-password", "sys-secret"]


async def test_a_node_put_in_lame_duck_outside_the_console_under_an_open_batch_is_batch_034(tmp_path):
    with EmbeddedCluster(tmp_path / "nats", 3, batch_limits=CLUSTER_LIMITS,
                         extra_config=ACCOUNTS + 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n') as cluster:
        first = cluster.nodes[0].url  # the collector's and the publisher's server: not the one stopped
        async with await nats.connect(first, user="app", password="app-secret") as nc:
            await nc.jetstream().add_stream(StreamConfig(name="NS_A", subjects=["ns_a.>"], num_replicas=3,
                                                         allow_atomic=True))
            await _lead(nc, "NS_A", "n3")
            made = time.monotonic()
        log = open(tmp_path / "collector.log", "w")
        collector = subprocess.Popen([CLI, "collect", "--server", first, *APP, *SYSTEM, "--tap-publish-side", "ns_a.>",
                                      "--data-dir", str(tmp_path), "--batch-timeout", str(CLUSTER_LIMITS.timeout)],
                                     stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_collecting(collector, tmp_path / "collector.log")
            async with await nats.connect(first, user="app", password="app-secret") as nc:
                batch = AtomicBatch(nc, batch_id="ns-open-at-the-stop")
                await batch.add("ns_a.x", b"1")
                await batch.add("ns_a.x", b"2")
                await nc.flush()
                # a stream's elections within NEW_STREAM of its creation drop nothing (it was just made): the
                # collector reads this one's as the stop's only once the stream is older than that
                await eventually(lambda: asyncio.sleep(0, time.monotonic() - made > NEW_STREAM.total_seconds() + 1),
                                 timeout=30, what="the stream older than a new one")
                os.kill(int(cluster.node("n3").pid_path.read_text()), signal.SIGUSR2)

            def found() -> list[dict]:
                done = subprocess.run([CLI, "check", "--server", first, *APP, "--data-dir", str(tmp_path),
                                       "--format", "json", "--code", "BATCH_034"],
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode in (0, 1, 2, 3), done.stdout + done.stderr  # 3: unchecked (no status yet)
                return [f for f in json.loads(done.stdout)["findings"] if f["code"] == "BATCH_034"]

            def how_it_stands() -> str:
                done = subprocess.run([CLI, "check", "--server", first, *APP, "--data-dir", str(tmp_path)],
                                      capture_output=True, text=True, timeout=60)
                return f"no BATCH_034 after the stop:\n{done.stdout[-3000:]}\ncollector:\n" + \
                    (tmp_path / "collector.log").read_text()[-3000:]

            poll_until(found, 90, how_it_stands, every=2.0)
            [finding] = found()
            assert "n3 entered lame duck mode" in finding["evidence"] and "1 batch(es) lost" in finding["evidence"]
        finally:
            collector.terminate()
            collector.wait(timeout=60)
