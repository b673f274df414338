"""On a cluster the publisher is named whichever node it is connected to: the collector asks every
server, and the node that holds the connection answers."""

import nats
from nats.js.api import StreamConfig

from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.events import LOST_KINDS
from tests.integration.test_collector_sources import _lose_a_fast_batch
from tests.waits import events_for


async def test_a_publisher_on_another_node_than_the_collector_and_the_stream_leader_is_named(accounts_cluster):
    urls = accounts_cluster.urls
    app = await nats.connect(urls[0], user="app", password="app-secret")
    await app.jetstream().add_stream(StreamConfig(name="ACROSS", subjects=["across.>"], allow_batched=True,
                                                  num_replicas=1))
    leader = (await app.jetstream().stream_info("ACROSS")).cluster.leader
    others = [(node, url) for node, url in zip(("n1", "n2", "n3"), urls) if node != leader]
    collector_nc = await nats.connect(others[0][1], user="app", password="app-secret")
    sys_nc = await nats.connect(others[0][1], user="sys", password="sys-secret")
    publisher = await nats.connect(others[1][1], user="app", password="app-secret", name="across-writer")
    collector = Collector(collector_nc, CollectorSettings(tick_every=0.1), system_nc=sys_nc)
    await collector.start()
    try:
        lost = await _lose_a_fast_batch(publisher, "across.x")
        events = await events_for(collector_nc, {lost}, lambda es: any(e.kind in LOST_KINDS for e in es), timeout=30)
        [loss] = [e for e in events if e.kind in LOST_KINDS]
        assert loss.publisher is not None, loss
        assert (loss.publisher.name, loss.publisher.cid) == ("across-writer", publisher.client_id)
        assert loss.publisher.server == others[1][0]  # neither the collector's node nor the stream leader
        assert loss.stream == "ACROSS"
    finally:
        await collector.stop()
        for nc in (app, collector_nc, sys_nc, publisher):
            await nc.close()
