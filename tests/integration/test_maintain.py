"""`batch-console maintain` on a real three-node cluster: the plan says what the server's own reports say
(the streams and consumers the node leads), a name that is not a server's is refused; a drain moves
every leadership off the node and waits, on a stream, for the atomic batch open there to commit (it
commits: nothing lost), under the lease that refuses a second maintenance; a batch held past the time
box is named before the step and its loss follows; each drain is one audited action."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import datetime, timezone

import nats
import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.maintenance import Lease
from console.config import event_key
from console.errors import BatchError
from tests.conftest import CLUSTER_LIMITS
from tests.integration.steady import SteadyPublisher
from tests.processes import CLI
from tests.waits import eventually

pytestmark = pytest.mark.cluster
STREAMS = ("MT_A", "MT_B", "MT_C")


def maintain(cluster, data_dir, *args: str, timeout: float = 120,
             batch_timeout: float = CLUSTER_LIMITS.timeout) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "maintain", *args, "--server", cluster.url, "--data-dir", str(data_dir),
                           "--batch-timeout", str(batch_timeout)],
                          capture_output=True, text=True, timeout=timeout)


def start_maintain(cluster, data_dir, *args: str, batch_timeout: float = CLUSTER_LIMITS.timeout) -> subprocess.Popen:
    return subprocess.Popen([CLI, "maintain", *args, "--server", cluster.url, "--data-dir", str(data_dir),
                             "--batch-timeout", str(batch_timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
async def led(cluster):
    """Three R3 streams (and a durable consumer on the first), every one led by the same node: its name."""
    nc = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    js = nc.jetstream()
    for name in STREAMS:
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3,
                                         allow_atomic=True, allow_batched=True))
    await js.add_consumer("MT_A", ConsumerConfig(durable_name="ops"))
    node = (await js.stream_info("MT_A")).cluster.leader
    for name in STREAMS:
        await _lead(nc, name, node)
    try:
        yield nc, node
    finally:
        for name in STREAMS:
            await js.delete_stream(name)
        await nc.close()


async def _lead(nc, stream: str, node: str) -> None:
    js = nc.jetstream()
    for _ in range(100):
        if (await js.stream_info(stream)).cluster.leader == node:
            return
        try:
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
                             json.dumps({"placement": {"preferred": node}}).encode(), timeout=5)
        except nats.errors.Error:
            pass
        await asyncio.sleep(0.3)
    raise AssertionError(f"{stream} is not led by {node}")


async def leaders(nc) -> dict[str, str]:
    js = nc.jetstream()
    return {name: (await js.stream_info(name)).cluster.leader for name in STREAMS}


async def test_the_plan_says_what_the_server_reports_and_refuses_a_name_that_is_not_a_server(led, cluster, tmp_path):
    nc, node = led
    batch = AtomicBatch(nc, batch_id="mt-plan")  # open on MT_A all the while the plan watches
    await batch.add("mt_a.x", b"0")
    planning = asyncio.ensure_future(asyncio.to_thread(maintain, cluster, tmp_path, "plan", node, "--format", "json"))
    while not planning.done():
        await batch.add("mt_a.x", b"x")
        await asyncio.sleep(0.5)
    done = await planning
    assert (await batch.commit("mt_a.x", b"end")).count > 2  # a plan changes nothing
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["verdict"] == "wait" and [(b["stream"], b["batch_id"], b["kind"]) for b in plan["open_batches"]] == \
        [("MT_A", "mt-plan", "atomic")], plan
    js = nc.jetstream()
    truth = {(s.config.name, None) for s in await js.streams_info() if s.cluster and s.cluster.leader == node}
    for s in await js.streams_info():
        if s.cluster and s.state.consumer_count:
            truth |= {(s.config.name, c.name) for c in await js.consumers_info(s.config.name)
                      if c.cluster and c.cluster.leader == node}
    assert {(g["stream"], g["consumer"]) for g in plan["leads"]} == truth
    assert {(s, None) for s in STREAMS} <= truth  # the fixture's streams are among them
    assert set(plan["nodes"]) == {"n1", "n2", "n3"} and not plan["refusals"]

    other = await asyncio.to_thread(maintain, cluster, tmp_path, "plan", "n9")
    assert other.returncode == 1 and "REFUSED" in other.stdout and "n9 is not a server of this cluster" in other.stdout
    drained = await asyncio.to_thread(maintain, cluster, tmp_path, "drain", "n9")
    assert drained.returncode == 1 and "maintain drain n9 refused: nothing moved" in drained.stderr
    for hostile in ("n1\nn2", "x" * 200, "a b", "\x1b[31m"):
        bad = await asyncio.to_thread(maintain, cluster, tmp_path, "plan", hostile)
        assert bad.returncode == 2 and "not a server name" in bad.stderr, bad.stderr
        assert "\x1b" not in bad.stderr


async def test_a_drain_moves_each_leadership_between_batches_and_the_open_batch_commits(led, cluster, tmp_path):
    nc, node = led
    event_key(data_dir=tmp_path)  # the console's key: its audit trail is signed with it
    batch = AtomicBatch(nc, batch_id="mt-open")
    await batch.add("mt_a.x", b"1")  # open on MT_A, led by the node, a message every half second (as a slow
    publishing = [True]              # publisher's batch would: idle past the batch timeout, the server abandons it)

    async def keep_open() -> None:
        while publishing[0]:
            await batch.add("mt_a.x", b"more")
            await asyncio.sleep(0.5)

    adding = asyncio.ensure_future(keep_open())
    consumer_led = (await nc.jetstream().consumer_info("MT_A", "ops")).cluster.leader == node
    groups = len(STREAMS) + consumer_led  # (the consumer's leader is elected apart from its stream's)
    drain = start_maintain(cluster, tmp_path, "drain", node, "--time-box", "60")
    try:
        # the other streams move once the drain has watched for a batch timeout; MT_A waits for its batch
        now = await eventually(lambda: leaders(nc), lambda ls: node not in (ls["MT_B"], ls["MT_C"]), timeout=60,
                               what="MT_B and MT_C moved off the node", every=0.3)
        assert now["MT_A"] == node and drain.poll() is None  # held while its batch is open
        await asyncio.sleep(2.0)  # a while later: still held (the time box is a minute)
        assert (await leaders(nc))["MT_A"] == node and drain.poll() is None
        publishing[0] = False
        await adding
        ack = await batch.commit("mt_a.x", b"end")
        assert ack.count > 3  # the batch that was open is stored whole
        out, err = await asyncio.to_thread(drain.communicate, timeout=90)
    finally:
        if drain.poll() is None:
            drain.kill()
    assert drain.returncode == 0, err
    assert node not in (await leaders(nc)).values()
    assert "ops" not in {c.name for c in await nc.jetstream().consumers_info("MT_A") if c.cluster.leader == node}
    assert "MT_A: moved to n" in err and "still open" not in err
    assert "the ledger cannot tell: no collector recorded" in err  # none runs: never "nothing lost"
    trail = subprocess.run([CLI, "audit", "--server", cluster.url, "--data-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert f"maintain.drain {node}" in trail.stdout and \
        f"moved {groups} of {groups} leadership(s); 0 batch(es) open" in trail.stdout, \
        trail.stdout


async def test_the_ledger_read_after_a_drain_says_what_was_lost_in_its_window_and_where(led, cluster, tmp_path):
    """A collector beside the cluster: an atomic batch abandoned on a stream the node does not lead while
    the drain runs is in the ledger's verdict as lost elsewhere; the streams moved lost nothing."""
    from console.broker.eventlog import EventLog
    from console.broker.maintenance_ledger import LedgerReader
    from console.config import DataSettings, Settings
    from console.domain.maintenance_record import maintenance_record

    nc, node = led
    event_key(data_dir=tmp_path)
    js = nc.jetstream()
    other = next(n for n in ("n1", "n2", "n3") if n != node)
    await js.add_stream(StreamConfig(name="MT_ELSE", subjects=["mt_else.>"], num_replicas=3, allow_atomic=True))
    await _lead(nc, "MT_ELSE", other)
    collector = subprocess.Popen([CLI, "collect", "--server", cluster.url, "--data-dir", str(tmp_path),
                                  "--batch-timeout", str(CLUSTER_LIMITS.timeout)],
                                 stdout=subprocess.DEVNULL, stderr=open(tmp_path / "collector.log", "w"))
    running = None
    try:
        ledger = LedgerReader(EventLog.over(nc, Settings(data=DataSettings(data_dir=tmp_path)).keyed_event_log(
            make=False)), CLUSTER_LIMITS.timeout, 5.0)
        await eventually(ledger.recording, timeout=60, what="the collector's first status in the ledger")
        started = datetime.now(timezone.utc)
        running = start_maintain(cluster, tmp_path, "drain", node, "--format", "json")

        async def begun() -> list:
            return await ledger.log.window(started, datetime.now(timezone.utc), kind_filter="maintenance.>",
                                           idle_timeout=0.5)

        # the batch opens inside the maintenance's window: a loaded machine can take longer than the batch
        # timeout to start the command, and a batch abandoned before the window opened is not its loss (CI)
        await eventually(begun, timeout=60, what="the maintenance's first record in the log")
        abandoned = AtomicBatch(nc, batch_id="mt-else-quiet")
        await abandoned.add("mt_else.x", b"1")  # and no more: the server abandons it after the batch timeout
        stdout, stderr = await asyncio.to_thread(running.communicate, timeout=120)
        done = subprocess.CompletedProcess(running.args, running.returncode, stdout, stderr)
    finally:
        if running is not None and running.poll() is None:
            running.kill()
        collector.terminate()
        collector.wait(timeout=60)
        await js.delete_stream("MT_ELSE")
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)["ledger"]
    assert verdict["recorded"] is True and verdict["lost"] == [] and verdict["elsewhere"] == 1, verdict
    assert "the ledger: no batch lost on the streams touched" in done.stderr
    assert "1 lost on other streams meanwhile" in done.stderr
    records = [maintenance_record(e) for _, e in await ledger.log.window(
        started, datetime.now(timezone.utc), kind_filter="maintenance.>", idle_timeout=1.0)]
    assert [(r.phase, r.action, r.nodes) for r in records] == [("begun", "drain", (node,)), ("ended", "drain", (node,))]
    assert records[1].lost == 0 and records[1].until >= records[1].end and records[0].id == records[1].id
    assert records[1].steps and all(": moved to n" in step for step in records[1].steps), records[1].steps


async def test_a_publisher_that_follows_holds_begins_no_batch_while_its_leader_moves_and_loses_none(led, cluster,
                                                                                                     tmp_path):
    """Batches back to back on MT_B from a publisher that follows maintenance holds, across ten drains (each
    of MT_B's leader in turn): each drain holds its new batches while MT_B's leader moves (it answered
    every hold), and none of its batches is lost; a forged hold beside it (malformed) is counted and holds
    nothing. (Each drain watches for 1 s, not the server's 5 s batch timeout: this publisher's batches
    last 60 ms, and ten drains fit in a test.)"""
    from console.broker.holds import Holds

    nc, node = led
    event_key(data_dir=tmp_path)
    publisher = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    holds = await Holds.follow(publisher, "test publisher")
    steady = SteadyPublisher(publisher, "mt_b.x", holds).start()
    try:
        async def forged() -> int:  # from another client, sent again until the follower's interest has reached it
            await nc.publish("batch_console.hold.MT_B", b'{"v": 1, "stream": "MT_B", "seconds": 1e400}')
            await nc.flush()
            return holds.refused

        await eventually(forged, lambda refused: refused >= 1, timeout=30, what="the forged hold counted", every=0.3)
        drains = []
        for _ in range(10):
            leader = (await nc.jetstream().stream_info("MT_B")).cluster.leader
            drains.append(await asyncio.to_thread(maintain, cluster, tmp_path, "drain", leader, "--time-box", "10",
                                                  batch_timeout=1.0))
            assert drains[-1].returncode == 0, drains[-1].stderr
    finally:
        await steady.stop()
        await holds.close()
        await publisher.close()
    for done in drains:
        [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("MT_B: moved to n")]
        assert "1 publisher(s) held their new batches" in line, done.stderr
    assert steady.lost == 0 and steady.committed > 0 and max(steady.held) > 0, \
        (steady.lost, steady.committed, max(steady.held, default=0))
    assert holds.refused >= 1  # counted, and it held nothing: the batches went on until the drain's own hold


async def test_a_second_maintenance_is_refused_and_a_batch_past_the_time_box_is_named_then_lost(led, cluster, tmp_path):
    nc, node = led
    lease = await Lease.take(nc, "another console", node, replicas=3)
    try:
        refused = await asyncio.to_thread(maintain, cluster, tmp_path, "drain", node)
    finally:
        await lease.release()
    assert refused.returncode == 1 and "another maintenance is under way: another console on " + node in refused.stderr
    assert (await leaders(nc))["MT_A"] == node  # nothing moved

    batch = AtomicBatch(nc, batch_id="mt-held")
    await batch.add("mt_a.x", b"1")
    started = time.monotonic()
    draining = asyncio.ensure_future(asyncio.to_thread(maintain, cluster, tmp_path, "drain", node, "--time-box", "1"))
    while not draining.done():  # kept open past the time box
        await batch.add("mt_a.x", b"x")
        await asyncio.sleep(0.5)
    done = await draining
    assert done.returncode == 0, done.stderr
    assert "batch(es) still open at the step: atomic mt-held" in done.stderr, done.stderr
    assert time.monotonic() - started < 60
    with pytest.raises(BatchError):  # named before the step, lost as named: the new leader dropped it
        await batch.commit("mt_a.x", b"2")


async def test_a_drain_killed_midway_moves_nothing_more_and_its_lease_expires(led, cluster, tmp_path):
    """The console killed while it watches: nothing is paused on the server (a drain only ever steps
    leaders down), the leaderships stay where they were, and the next maintenance starts once the lease
    has expired."""
    from console.broker.maintenance import LEASE_BUCKET, LEASE_KEY, LEASE_TTL

    nc, node = led
    drain = start_maintain(cluster, tmp_path, "drain", node, "--time-box", "60", batch_timeout=120)  # a long watch
    kv = None
    try:
        kv = await eventually(lambda: nc.jetstream().key_value(LEASE_BUCKET), lambda kv: kv is not None, timeout=60,
                              what="the lease bucket")
        await eventually(lambda: kv.get(LEASE_KEY), lambda entry: entry.value, timeout=60, what="the lease taken")
    finally:
        drain.kill()  # while it watches for open batches: before any step
        drain.wait(timeout=30)
    assert set((await leaders(nc)).values()) == {node}
    started = time.monotonic()
    await eventually(lambda: _lease_gone(kv), lambda gone: gone, timeout=LEASE_TTL + 30, what="the lease expired",
                     every=1.0)
    assert time.monotonic() - started <= LEASE_TTL + 30
    done = await asyncio.to_thread(maintain, cluster, tmp_path, "drain", node, "--time-box", "1")
    assert done.returncode == 0, done.stderr
    assert node not in (await leaders(nc)).values()


async def _lease_gone(kv) -> bool:
    import nats.js.errors

    try:
        await kv.get("lease")
    except nats.js.errors.KeyNotFoundError:
        return True
    return False


async def test_an_evacuation_moves_a_replica_where_a_server_can_take_it_and_a_following_publisher_loses_nothing(
        led, cluster, tmp_path):
    """`drain --evacuate` (2.15): the plan says which streams can move (an R1 stream: its leader moves
    with it) and which stay (R3 on three servers); the R1 stream's replica goes to another server while
    a publisher following holds sends batches on it, none lost; the R3 streams stay where they were."""
    from console.broker.holds import Holds

    nc, _ = led
    event_key(data_dir=tmp_path)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="EV_ONE", subjects=["ev_one.>"], num_replicas=1, allow_atomic=True))
    node = (await js.stream_info("EV_ONE")).cluster.leader
    publisher = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    holds = await Holds.follow(publisher, "test publisher")
    steady = SteadyPublisher(publisher, "ev_one.x", holds).start()
    try:
        planned = await asyncio.to_thread(maintain, cluster, tmp_path, "plan", node, "--evacuate", "--watch", "0",
                                          "--format", "json")
        done = await asyncio.to_thread(maintain, cluster, tmp_path, "drain", node, "--evacuate", "--time-box", "10",
                                       "--format", "json")
    finally:
        await steady.stop()
        await holds.close()
        await publisher.close()
    try:
        evacuation = json.loads(planned.stdout)["evacuate"]
        assert "EV_ONE" in evacuation["movable"] and "EV_ONE" in evacuation["leader_moves"], planned.stdout
        assert set(STREAMS) <= set(evacuation["stuck"]) and evacuation["why_not"] is None  # (and the console's own)
        assert done.returncode == 0, done.stderr
        [moved] = [e for e in json.loads(done.stdout)["evacuated"] if e["stream"] == "EV_ONE"]
        assert moved["stream"] == "EV_ONE" and moved["error"] is None and node not in moved["replicas"], moved
        assert moved["publishers_held"] == 1, done.stderr
        assert (await js.stream_info("EV_ONE")).cluster.leader not in (None, node)
        assert steady.lost == 0 and steady.committed > 0, (steady.lost, steady.committed)
        for name in STREAMS:  # every server holds one of their replicas: they stay
            assert node in {r.name for r in (await js.stream_info(name)).cluster.replicas or []} | {
                (await js.stream_info(name)).cluster.leader}
    finally:
        await js.delete_stream("EV_ONE")


def test_evacuate_is_refused_where_the_server_cannot_and_for_a_restart(tmp_path):
    from console.domain.maintenance import Group, evacuation

    groups = [Group("A", None, "n1", ())]
    assert "needs nats-server 2.15" in evacuation("n1", groups, ("n1", "n2"), "2.14.6").why_not
    assert "needs nats-server 2.15" in evacuation("n1", groups, ("n1", "n2"), "nonsense\x00").why_not
    assert evacuation("n1", groups, ("n1", "n2"), "2.15.1").movable == ("A",)
    done = subprocess.run([CLI, "maintain", "restart", "n1", "--run", "true", "--evacuate", "--data-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--evacuate is for plan and drain" in done.stderr


async def test_a_natsjs_publisher_written_from_the_holds_protocol_alone_loses_nothing_across_a_drain(
        led, cluster, tmp_path, natsjs):
    """tests/peers/natsjs/holds.mjs follows maintenance holds as the README's protocol says, in nats.js:
    batches back to back on MT_C across the drain of its leader, none lost; it answered the hold."""
    from tests.integration.conftest import PEER

    nc, node = led
    event_key(data_dir=tmp_path)
    steady = subprocess.Popen(["node", str(PEER / "steady.mjs"), ",".join(cluster.urls), "mt_c.js", "holds"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert steady.stderr.readline().strip() == "ready"
        done = await asyncio.to_thread(maintain, cluster, tmp_path, "drain", node, "--time-box", "10")
    finally:
        steady.terminate()
        out, err = steady.communicate(timeout=60)
    assert done.returncode == 0, done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("MT_C: moved to n")]
    assert "1 publisher(s) held their new batches" in line, done.stderr
    counts = json.loads(out.splitlines()[-1])
    assert counts["lost"] == 0 and counts["committed"] > 0 and counts["answered"] >= 1, (counts, err)


async def test_a_node_down_and_the_quorum_it_leaves_are_refused_on_a_real_cluster(tmp_path):
    """One node of three killed: its own plan is refused (down), and so is another's (an R3 group would be
    left with one of three current); nothing is moved. The node started again, the plans are safe."""
    from console.broker.cluster import EmbeddedCluster

    with EmbeddedCluster(tmp_path / "nats", 3, batch_limits=CLUSTER_LIMITS) as small:
        async with await nats.connect(small.urls) as nc:
            await nc.jetstream().add_stream(StreamConfig(name="MQ_A", subjects=["mq_a.>"], num_replicas=3))
        small.kill(2)

        def plan_of(node: str) -> dict:
            done = maintain(small, tmp_path, "plan", node, "--watch", "0", "--format", "json")
            return json.loads(done.stdout) if done.stdout.strip() else {"refusals": [done.stderr[-300:]]}

        down = await eventually(lambda: asyncio.to_thread(plan_of, "n3"),
                                lambda p: any("n3 is down or behind already" in r for r in p["refusals"]), timeout=60,
                                what="n3's plan refused as down", every=1.0)
        assert down["verdict"] == "refused"
        other = await asyncio.to_thread(plan_of, "n2")
        assert other["verdict"] == "refused" and any("MQ_A (R3) would lose its quorum: 1 of 3" in r
                                                     for r in other["refusals"]), other
        small.restart(2)
        await eventually(lambda: asyncio.to_thread(plan_of, "n2"), lambda p: p.get("verdict") != "refused",
                         timeout=90, what="n2's plan once n3 is back", every=1.0)
