"""On a real three-node cluster with R3 streams: what leader changes do to batches, as the publisher
saw it and as the event log records it (the server raises no batch_abandoned advisory for these)."""

import asyncio
import json
import uuid
from datetime import datetime, timezone

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.admin import StreamAdmin
from console.broker.fast import FastBatch
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.events import LOST_KINDS, EventKind
from console.errors import BatchEndedError, BatchError, NoRespondersError, Refusal
from tests.conftest import CLUSTER_LIMITS
from tests.waits import eventually, events_for, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture
async def client(cluster):
    conn = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    yield conn
    await conn.close()


@pytest.fixture
async def collector(cluster):
    conn = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    c = Collector(conn, CollectorSettings(batch_timeout=CLUSTER_LIMITS.timeout, status_every=0.5, tick_every=0.1))
    await c.start()
    yield c
    await c.stop()
    await conn.close()


async def r3_stream(client, name: str, **flags) -> StreamAdmin:
    admin = StreamAdmin(client)
    # a node restarted by the test before can take a while under load to be a placement peer again
    await eventually(lambda: client.jetstream().add_stream(StreamConfig(
        name=name, subjects=[f"{name.lower()}.>"], num_replicas=3, **flags)), what=f"{name} created", timeout=60)
    await eventually(lambda: admin.leader(name), what=f"{name} has a leader", timeout=30)
    return admin


JS_UNAVAILABLE = 10008  # "JetStream system temporarily unavailable": a cluster still settling after a node's return


async def step_down(admin: StreamAdmin, name: str, preferred: str | None = None) -> str:
    before = await eventually(lambda: admin.leader(name), lambda _: True, timeout=30, what=f"{name}'s leader")

    async def asked() -> bool:
        try:
            await admin.step_down(name, preferred)
        except Refusal as e:  # asked again while the cluster settles (CI saw it once); any other refusal fails
            if preferred is not None and await admin.leader(name) == preferred:
                return True  # an ask before it, refused with 10008, was taken after all (CI: "already leader")
            if e.err_code != JS_UNAVAILABLE:
                raise
            return False
        return True

    await eventually(asked, timeout=30, what=f"{name}'s stepdown taken")
    return await eventually(lambda: admin.leader(name), lambda leader: leader not in (None, before),
                            what=f"{name} elected another leader", timeout=30)


async def finish(batch: FastBatch, subject: str):
    """29 more messages and the commit: (its PubAck, None), or (None, the error that refused the batch)."""
    try:
        for _ in range(29):
            await batch.add(subject, b"after")
        return await batch.commit(subject, b"last"), None
    except BatchError as e:
        return None, e


async def test_the_cluster_replicates_the_consoles_own_streams(client, collector):
    js = client.jetstream()
    for stream in ("BATCH_CONSOLE_EVENTS", "BATCH_CONSOLE_ADVISORIES", "BATCH_CONSOLE_QUARANTINE"):
        assert (await js.stream_info(stream)).config.num_replicas == 3


@pytest.mark.parametrize("gap_mode", ["fail", "ok"])
async def test_a_fast_batch_across_a_leader_change_is_logged_as_the_publisher_saw_it(client, collector, gap_mode):
    name = f"CL_FAST_{gap_mode.upper()}"
    admin = await r3_stream(client, name, allow_batched=True)
    batch = FastBatch(client, flow=10, gap_mode=gap_mode, ack_timeout=10)
    for _ in range(30):
        await batch.add(f"{name.lower()}.x", b"before")
    await step_down(admin, name)
    ack, refused = await finish(batch, f"{name.lower()}.x")
    wanted = (EventKind.FAST_LOST, EventKind.FAST_COMMITTED, EventKind.FAST_ENDED_EARLY)
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind in wanted for e in es), timeout=30)
    kinds = [e.kind for e in events]
    if ack is not None:  # the new leader carried the batch on: no loss may be left standing
        [committed] = [e for e in events if e.kind is EventKind.FAST_COMMITTED]
        assert committed.count == ack.count == 60 and committed.stream == name
        assert not [k for k in kinds if k in LOST_KINDS]
    elif isinstance(refused, BatchEndedError):  # the new leader knew the batch but not all of it: in fail
        assert gap_mode == "fail", repr(refused)  # mode the gap ends it, and the log says so, once
        [ended] = [e for e in events if e.kind is EventKind.FAST_ENDED_EARLY]
        assert (ended.stream, ended.reason) == (name, "gap")
        assert kinds.count(EventKind.FAST_ENDED_EARLY) == 1 and EventKind.FAST_COMMITTED not in kinds
    else:  # the publisher was refused: the log says the batch was lost, and why, once
        assert getattr(refused, "err_code", None) == 10208, repr(refused)
        [lost] = [e for e in events if e.kind is EventKind.FAST_LOST]
        assert (lost.stream, lost.reason, lost.gap_mode) == (name, "leader_change", gap_mode)
        assert kinds.count(EventKind.FAST_LOST) == 1 and EventKind.FAST_COMMITTED not in kinds


async def test_a_fast_batch_whose_stream_leader_dies_is_logged_as_the_publisher_saw_it(cluster, client):
    """SIGKILL the stream leader's node mid-batch: until a new leader is elected no stream answers
    (503 on the $FI replies), so the rest of the batch is not stored and the server never says so."""
    name = "CL_KILL"
    admin = await r3_stream(client, name, allow_batched=True)
    victim = cluster.nodes.index(cluster.node(await admin.leader(name)))
    elsewhere = [url for i, url in enumerate(cluster.urls) if i != victim]
    publisher = await nats.connect(elsewhere)
    watcher = await nats.connect(elsewhere)
    collector = Collector(watcher, CollectorSettings(batch_timeout=CLUSTER_LIMITS.timeout, tick_every=0.1))
    await collector.start()
    batch = FastBatch(publisher, flow=10, gap_mode="fail", ack_timeout=10)
    try:
        for _ in range(30):
            await batch.add(f"{name.lower()}.x", b"before")
        # The tap judges a silent batch by its rate, which two acks tell; with one seen (a loaded machine
        # where the victim dies before routing the next) it says slow-or-dropped, rightly not a loss
        await wait_until(lambda: (b := collector.tracker.batches.get(batch.batch_id)) is not None
                         and b.acks_total >= 2, 30, "the tap seeing two of the batch's flow acks")
        cluster.kill(victim)
        ack, refused = await finish(batch, f"{name.lower()}.x")
        wanted = (*LOST_KINDS, EventKind.FAST_COMMITTED)
        events = await events_for(watcher, {batch.batch_id}, lambda es: any(e.kind in wanted for e in es), timeout=30)
    finally:
        await collector.stop()
        cluster.restart(victim)
        cluster.wait_for_meta_leader()
        for conn in (publisher, watcher):
            await conn.close()
    kinds = [e.kind for e in events]
    if ack is not None:
        assert EventKind.FAST_COMMITTED in kinds and not [k for k in kinds if k in LOST_KINDS]
        return
    [lost] = [e for e in events if e.kind in LOST_KINDS]  # one loss, however it was learned
    assert EventKind.FAST_COMMITTED not in kinds
    if isinstance(refused, NoRespondersError):
        # The 503 goes to the publisher alone: the tap sees the batch fall silent while its rate
        # said acks were due, past the server's timeout.
        assert lost.kind in (EventKind.FAST_DROPPED, EventKind.FAST_LOST), lost
    else:
        assert getattr(refused, "err_code", None) == 10208, repr(refused)
        assert lost.kind is EventKind.FAST_LOST and lost.reason in ("leader_change", "unknown_batch")
    # The tap and the publisher agree on the last message acknowledged, but for the flow ack the dying
    # leader sent last: its node may be killed before routing it to the tap's node (seen once: 20 and 30)
    assert batch.ack_seq - batch.flow <= lost.seq <= batch.ack_seq, (lost.seq, batch.ack_seq)


async def test_the_collectors_node_killed_under_load_loses_and_duplicates_no_advisory(cluster, client):
    from console.broker.atomic import AtomicBatch

    name = "CL_ATOMIC"
    admin = await r3_stream(client, name, allow_atomic=True)
    while await admin.leader(name) == "n1":  # the publisher's stream lives on; the collector's node dies
        await step_down(admin, name)
    watcher = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2, dont_randomize=True)
    assert watcher.connected_url.port == int(cluster.urls[0].rsplit(":", 1)[1])  # on n1
    collector = Collector(watcher, CollectorSettings(batch_timeout=CLUSTER_LIMITS.timeout, tick_every=0.1))
    await collector.start()
    # The node the collector is connected to dies, not the advisories' leaders: what the server raises
    # while the advisory stream elects a leader is stored nowhere (see the README, "On a cluster").
    publisher = await nats.connect(cluster.urls[1:])
    ids = [f"failover-{i}" for i in range(40)]
    try:  # from here the collector is stopped whatever fails: a leftover one would take the next tests' advisories
        await leaders_off(admin, "BATCH_CONSOLE_ADVISORIES", "batch-console-collector", "n1")
        for i, batch_id in enumerate(ids):
            if i == 20:
                cluster.kill(0)  # the collector's node, under load
            batch = AtomicBatch(publisher, batch_id=batch_id)
            await eventually(lambda: batch.add(f"{name.lower()}.x", b"1"), lambda _: True, timeout=30,
                             what="the stream answers again")
            batch.skip_seq()
            with pytest.raises(BatchError):
                await batch.commit(f"{name.lower()}.x", b"3")
        reader = await nats.connect(cluster.urls[1:])
        events = await events_for(reader, set(ids), lambda es: len({e.batch_id for e in es}) == len(ids), timeout=90)
        await reader.close()
    finally:
        await collector.stop()
        cluster.restart(0)
        cluster.wait_for_meta_leader()
        for conn in (watcher, publisher):
            await conn.close()
    abandoned = [e for e in events if e.kind is EventKind.ATOMIC_ABANDONED]
    assert sorted(e.batch_id for e in abandoned) == sorted(ids)  # each once: none lost, none twice


@pytest.fixture
async def tapping_collector(cluster):
    """A collector that also taps the publish side of the cl_tap.> subjects."""
    conn = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    settings = CollectorSettings(batch_timeout=CLUSTER_LIMITS.timeout, tick_every=0.1,
                                 tap_publish_subjects=("cl_tap_lead.>", "cl_tap_off.>", "cl_tap_gone.>",
                                                       "cl_tap_new.>"))
    c = Collector(conn, settings)
    await c.start()
    yield c
    await c.stop()
    await conn.close()


async def open_atomic_batch(client, collector, subject: str, messages: int = 3):
    from console.broker.atomic import AtomicBatch

    async def tap_sees_a_batch() -> bool:  # the tap's interest reaches the other nodes in its own time
        seen = collector.atomic.tracker.messages
        await AtomicBatch(client).commit(subject, b"probe")  # a batch of one message, committed
        await asyncio.sleep(0.05)
        return collector.atomic.tracker.messages > seen

    await eventually(tap_sees_a_batch, timeout=30, what="the publish-side tap is in place")
    batch = AtomicBatch(client)
    for _ in range(messages):
        await batch.add(subject, b"open")
    await client.flush()
    return batch


async def test_a_tapped_atomic_batch_across_a_leader_change_is_atomic_lost(client, tapping_collector):
    name = "CL_TAP_LEAD"
    admin = await r3_stream(client, name, allow_atomic=True)
    batch = await open_atomic_batch(client, tapping_collector, "cl_tap_lead.x")
    await wait_until(lambda: tapping_collector.atomic.tracker.open_on(name), timeout=15,
                     what="the tap saw the open batch")
    await step_down(admin, name)
    with pytest.raises(BatchError) as refused:
        await batch.commit("cl_tap_lead.x", b"end")
    assert refused.value.err_code == 10176  # what the publisher is told; no advisory is raised
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.ATOMIC_LOST for e in es),
                              timeout=30)
    [lost] = [e for e in events if e.kind is EventKind.ATOMIC_LOST]
    assert (lost.stream, lost.reason, lost.seq, lost.inferred) == (name, "leader_change", 3, False)
    assert "its commit was refused (10176)" in lost.detail  # the collector heard the refusal itself
    assert EventKind.ATOMIC_ABANDONED not in [e.kind for e in events]


async def test_a_batch_open_at_an_election_that_commits_after_all_is_not_lost(client, tapping_collector):
    """The tap's order of a batch's first message and an election's advisory is not the server's: a batch
    begun on the new leader can look open at the election (bench/maintain.py found the loss ledger
    counting such batches). Made certain here with an election advisory published by a client, which the
    collector cannot tell from the server's: the batch's commit answers with a PubAck, which the
    collector hears, so it is not lost. A batch open at a real election, refused at its commit, is."""
    name = "CL_TAP_NEW"
    admin = await r3_stream(client, name, allow_atomic=True)
    tracker = tapping_collector.atomic.tracker
    kept = await open_atomic_batch(client, tapping_collector, "cl_tap_new.x", messages=2)
    await wait_until(lambda: kept.batch_id in tracker.batches, timeout=15, what="the tap saw the open batch")
    forged = {"type": "io.nats.jetstream.advisory.v1.stream_leader_elected", "id": uuid.uuid4().hex,
              "timestamp": datetime.now(timezone.utc).isoformat(), "stream": name, "leader": "n9", "replicas": []}
    await client.publish(f"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{name}", json.dumps(forged).encode())
    await wait_until(lambda: tracker.batches[kept.batch_id].dropped_at is not None, timeout=15,
                     what="the batch is a suspect of the election")
    await kept.commit("cl_tap_new.x", b"end")  # no election happened: the leader commits it
    refused = await open_atomic_batch(client, tapping_collector, "cl_tap_new.x")
    await wait_until(lambda: refused.batch_id in tracker.batches, timeout=15, what="the tap saw the open batch")
    await step_down(admin, name)
    with pytest.raises(BatchError):
        await refused.commit("cl_tap_new.x", b"end")
    events = await events_for(client, {refused.batch_id, kept.batch_id},
                              lambda es: any(e.kind is EventKind.ATOMIC_LOST for e in es), timeout=30)
    assert [e.batch_id for e in events if e.kind is EventKind.ATOMIC_LOST] == [refused.batch_id]
    assert kept.batch_id not in tracker.committing  # answered, not waiting: nothing more will be said of it


async def test_allow_atomic_switched_off_under_an_open_tapped_batch_is_atomic_lost(client, tapping_collector):
    name = "CL_TAP_OFF"
    await r3_stream(client, name, allow_atomic=True)
    batch = await open_atomic_batch(client, tapping_collector, "cl_tap_off.x")
    await wait_until(lambda: tapping_collector.atomic.tracker.open_on(name), timeout=15,
                     what="the tap saw the open batch")
    js = client.jetstream()
    config = (await js.stream_info(name)).config
    config.allow_atomic = False
    await js.update_stream(config)
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.ATOMIC_LOST for e in es),
                              timeout=30)
    [lost] = [e for e in events if e.kind is EventKind.ATOMIC_LOST]
    assert (lost.stream, lost.reason) == (name, "disabled")


async def test_without_the_tap_a_leader_change_warns_that_open_atomic_batches_were_dropped(client, collector):
    from console.broker.eventlog import EventLog

    name = "CL_UNTAPPED"
    admin = await r3_stream(client, name, allow_atomic=True)
    await step_down(admin, name)
    log = EventLog(client.jetstream())

    async def warnings():
        return [e for _, e in await log.read(1, idle_timeout=0.2)
                if e.kind is EventKind.ATOMIC_OPEN_DROPPED and e.stream == name]

    [warning] = await eventually(warnings, bool, timeout=30, what="the warning")
    assert warning.reason == "leader_change" and "tap the publish side" in warning.detail


async def leaders_off(admin: StreamAdmin, stream: str, consumer: str, node: str) -> None:
    """Step the stream's and the consumer's leaders down until neither is on `node`. A request that
    times out while the cluster elects is asked again."""
    js = admin.js
    while await eventually(lambda: admin.leader(stream), lambda _: True, timeout=30, what=f"{stream}'s leader") == node:
        await step_down(admin, stream)

    async def consumer_leader():
        return (await js.consumer_info(stream, consumer)).cluster.leader

    while await eventually(consumer_leader, lambda _: True, timeout=30, what=f"{consumer}'s leader") == node:
        await admin.nc.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}", b"", timeout=5)
        await eventually(consumer_leader, lambda leader: leader not in (None, node), timeout=30,
                         what=f"{consumer} elected another leader")


async def test_a_stream_deleted_under_an_open_tapped_batch_is_atomic_lost(client, tapping_collector):
    name = "CL_TAP_GONE"
    await r3_stream(client, name, allow_atomic=True)
    batch = await open_atomic_batch(client, tapping_collector, "cl_tap_gone.x")
    await wait_until(lambda: tapping_collector.atomic.tracker.open_on(name), timeout=15,
                     what="the tap saw the open batch")
    await client.jetstream().delete_stream(name)
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.ATOMIC_LOST for e in es),
                              timeout=30)
    [lost] = [e for e in events if e.kind is EventKind.ATOMIC_LOST]
    assert (lost.stream, lost.reason) == (name, "stream_deleted")
