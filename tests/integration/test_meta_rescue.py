"""nats-server 2.15's meta rescue on a real cluster: two nodes of three lost, the meta group's quorum
lowered on the one left ($JS.API.META.RESCUE from the system account); the collector beside it (its event
log on that node) keeps the rescue advisory the system account sent as an event of no stream."""

from __future__ import annotations

import json
import subprocess

import nats
import pytest

from console.broker.cluster import EmbeddedCluster
from console.broker.eventlog import EventLog
from console.config import DataSettings, Settings
from tests.conftest import CLUSTER_LIMITS
from tests.processes import CLI, wait_collecting
from tests.supercluster import ACCOUNTS
from tests.waits import eventually

pytestmark = pytest.mark.cluster


async def test_a_meta_rescue_is_kept_as_an_event(tmp_path):
    with EmbeddedCluster(tmp_path / "nats", 3, batch_limits=CLUSTER_LIMITS, extra_config=ACCOUNTS) as cluster:
        log = open(tmp_path / "collector.log", "w")
        collector = subprocess.Popen([CLI, "collect", "--server", cluster.nodes[0].url, "--user", "app", "--password",
                                      "app-secret", "--system-user", "sys", "--system-password", "sys-secret",
                                      "--replicas", "1", "--data-dir", str(tmp_path)],
                                     stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_collecting(collector, tmp_path / "collector.log")
            async with await nats.connect(cluster.nodes[0].url, user="app", password="app-secret") as app:
                info = await app.jetstream().stream_info("BATCH_CONSOLE_EVENTS")
                home = info.cluster.leader  # the event log's one replica: the node that stays
                for i, node in enumerate(cluster.nodes):
                    if f"n{i + 1}" != home:
                        cluster.kill(i)
                kept = cluster.node(home)
                async with await nats.connect(kept.url, user="sys", password="sys-secret") as system:
                    async def rescued() -> bool:
                        reply = await system.request("$JS.API.META.RESCUE", json.dumps({"quorum_needed": 1}).encode(),
                                                     timeout=2)
                        return "new_quorum" in json.loads(reply.data)

                    await eventually(rescued, timeout=60, what="the rescue applied (once the leader is lost)",
                                     every=1.0)
                async with await nats.connect(kept.url, user="app", password="app-secret") as reader:
                    events = EventLog.over(reader, Settings(data=DataSettings(data_dir=tmp_path)).keyed_event_log(
                        make=False))

                    async def found() -> list:
                        return [e for _, e in await events.read(1, kind_filter="context.>", idle_timeout=0.5)
                                if e.reason == "meta_rescue"]

                    [event] = await eventually(found, timeout=60, what="the rescue in the event log", every=1.0)
            assert event.stream is None and event.source == "system_advisory"
            assert event.detail == f"meta_rescue:{home} lowered the meta group's quorum from 2 to 1"
        finally:
            collector.terminate()
            collector.wait(timeout=60)
