"""A hub and a leaf node, each its own JetStream domain (nats-server processes on loopback), the hub
sourcing the leaf's atomic stream: a batch abandoned at the leaf reaches the collector beside the hub with
its domain (the advisory crosses the leaf connection and names "domain": "leaf1", verified on 2.15.1), and
Live shows the domain beside the loss."""

from __future__ import annotations

import subprocess

import nats
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from console.broker.atomic import AtomicBatch
from console.broker.cluster import free_port
from console.broker.eventlog import EventLog
from console.broker.server import EmbeddedServer
from console.config import DataSettings, Settings
from console.domain.events import EventKind
from console.domain.live_model import LiveModel
from console.ui.live import recent_frame
from tests.conftest import TEST_LIMITS
from tests.processes import CLI, wait_collecting
from tests.waits import eventually


async def test_a_loss_at_a_leaf_reaches_the_hubs_collector_with_its_domain(tmp_path):
    port = free_port()
    with EmbeddedServer(tmp_path / "hub", batch_limits=TEST_LIMITS, jetstream_config='domain: "hub"',
                        extra_config=f'server_name: "hub"\nleafnodes {{ listen: "127.0.0.1:{port}" }}\n') as hub, \
            EmbeddedServer(tmp_path / "leaf", batch_limits=TEST_LIMITS, jetstream_config='domain: "leaf1"',
                           extra_config=f'server_name: "leaf1"\nleafnodes {{ remotes: [ {{ url: '
                                        f'"nats://127.0.0.1:{port}" }} ] }}\n') as leaf:
        log = open(tmp_path / "collector.log", "w")
        collector = subprocess.Popen([CLI, "collect", "--server", hub.url, "--data-dir", str(tmp_path / "data"),
                                      "--batch-timeout", "1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_collecting(collector, tmp_path / "collector.log")
            async with await nats.connect(leaf.url) as at_leaf, await nats.connect(hub.url) as at_hub:
                await at_leaf.jetstream().add_stream(StreamConfig(name="EDGE", subjects=["edge.>"], allow_atomic=True))

                async def sourced() -> bool:  # the leaf's domain answers over the leaf connection once it is up
                    await at_hub.jetstream().add_stream(StreamConfig(name="HUB_EDGE", sources=[StreamSource(
                        name="EDGE", external=ExternalStream(api="$JS.leaf1.API"))]))
                    return True

                await eventually(sourced, timeout=30, what="the hub's source of the leaf's stream")
                batch = AtomicBatch(at_leaf, batch_id="lost-at-the-leaf")
                await batch.add("edge.x", b"1")  # and no more: the leaf's server abandons it after 1 s
                events = EventLog.over(at_hub, Settings(data=DataSettings(data_dir=tmp_path / "data")).keyed_event_log(
                    make=False))

                async def lost() -> list:
                    return [e for _, e in await events.read(1, idle_timeout=0.5)
                            if e.kind is EventKind.ATOMIC_ABANDONED and e.batch_id == "lost-at-the-leaf"]

                [event] = await eventually(lost, timeout=60, what="the leaf's loss in the hub's event log", every=0.5)
        finally:
            collector.terminate()
            collector.wait(timeout=60)
    assert (event.stream, event.domain) == ("EDGE", "leaf1")
    model = LiveModel()
    model.apply(event)
    frame = recent_frame(model)
    assert "domain" in frame.columns and list(frame["domain"]) == ["leaf1"]
