"""A supercluster: clusters east and west of three nodes each, joined by gateways, a publisher in each.
The collector (connected in east, with the system account) finds both clusters and taps `$FI` replies
in each through one queue group, so every reply is heard in the cluster it is published in: fast-ingest
gaps and atomic abandonments in both clusters are recorded with their cluster, a leader change in one
cluster loses nothing in the other, and the tap pulls no reply across a gateway (the gateways' byte
counters: a plain tap in east, beside it, pulls every west reply across)."""

from __future__ import annotations

import asyncio
import signal
import subprocess

import nats
import pytest
from nats.js.api import Placement, StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.connection import flush
from console.broker.fast import FastBatch
from console.domain.events import EventKind
from tests.conftest import TEST_LIMITS
from tests.processes import CLI
from tests.supercluster import Supercluster
from tests.waits import collector_ready, events_for, poll_until

CLUSTERS = ("east", "west")
MESSAGES = 10_000  # per fast batch, flow 10: 1,000 acks


@pytest.fixture(scope="module")
def supercluster(tmp_path_factory):
    with Supercluster(tmp_path_factory.mktemp("supercluster"), CLUSTERS, batch_limits=TEST_LIMITS) as sc:
        yield sc


async def _fast(nc, cluster: str, batch_id: str, gap: bool) -> int:
    batch = FastBatch(nc, batch_id=batch_id, flow=10, gap_mode="ok")
    for i in range(MESSAGES - 1):
        if gap and i == MESSAGES // 2:
            batch.skip_seq()
        await batch.add(f"sc.{cluster}.x", b"x" * 64)
    return (await batch.commit(f"sc.{cluster}.x", b"x" * 64)).count


async def _gateway_traffic_for(sc: Supercluster, work) -> tuple[int, int]:
    """The messages and payload bytes every gateway carried while `work` ran (and the counters caught up)."""
    before = sc.gateway_traffic()
    await work
    await asyncio.sleep(1.5)  # the monitor's counters trail the traffic by up to a second
    after = sc.gateway_traffic()
    return after[0] - before[0], after[1] - before[1]


async def test_a_supercluster_is_tapped_in_each_cluster(supercluster: Supercluster, tmp_path):
    sc = supercluster
    systems = tmp_path / "systems.toml"
    east_urls = ", ".join(f'"{u}"' for u in sc.url("east").split(","))
    systems.write_text(f'[[system]]\nname = "sc"\nservers = [{east_urls}]\nuser = "app"\npassword = "app-secret"\n'
                       'system_user = "sys"\nsystem_password = "sys-secret"\n')
    log = tmp_path / "collect.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([CLI, "collect", "--systems", str(systems), "--batch-timeout", "1",
                                 "--data-dir", str(tmp_path / "data")], stdout=out, stderr=subprocess.STDOUT)
    clients = {c: await nats.connect(sc.url(c).split(","), user="app", password="app-secret") for c in CLUSTERS}
    bare = None
    try:
        await collector_ready(clients["east"].jetstream(), proc)
        poll_until(lambda: "supercluster: clusters east, west, a $FI tap in each" in log.read_text(), 60,
                   lambda: log.read_text()[-3000:])
        for c, nc in clients.items():
            await nc.jetstream().add_stream(StreamConfig(name=f"SC_{c.upper()}", subjects=[f"sc.{c}.>"],
                                                         allow_atomic=True, allow_batched=True, num_replicas=3,
                                                         placement=Placement(cluster=c)))

        # A gap in each cluster, by its own publisher: recorded with its cluster; no reply crossed a gateway.
        crossed = await _gateway_traffic_for(sc, asyncio.gather(
            *(_fast(nc, c, f"sc-gap-{c}", gap=True) for c, nc in clients.items())))
        gaps = await events_for(clients["east"], {f"sc-gap-{c}" for c in CLUSTERS},
                                lambda es: {e.batch_id for e in es if e.kind is EventKind.FAST_GAP} == {
                                    f"sc-gap-{c}" for c in CLUSTERS}, timeout=60)
        assert {(e.batch_id, e.cluster) for e in gaps if e.kind is EventKind.FAST_GAP} == \
            {(f"sc-gap-{c}", c) for c in CLUSTERS}

        # An abandoned atomic batch in each cluster: with its stream's cluster.
        for c, nc in clients.items():
            batch = AtomicBatch(nc, batch_id=f"sc-atomic-{c}")
            await batch.add(f"sc.{c}.a", b"x")
            batch.discard()
        abandoned = await events_for(clients["east"], {f"sc-atomic-{c}" for c in CLUSTERS},
                                     lambda es: len({e.batch_id for e in es}) == 2, timeout=60)
        assert {(e.batch_id, e.cluster, e.kind) for e in abandoned} == \
            {(f"sc-atomic-{c}", c, EventKind.ATOMIC_ABANDONED) for c in CLUSTERS}

        # A leader change in east while west publishes: west loses nothing.
        stepdown = clients["east"].request("$JS.API.STREAM.LEADER.STEPDOWN.SC_EAST", b"", timeout=30)
        count, _ = await asyncio.gather(_fast(clients["west"], "west", "sc-calm-west", gap=False), stepdown)
        assert count == MESSAGES
        calm = await events_for(clients["east"], {"sc-calm-west"},
                                lambda es: any(e.kind is EventKind.FAST_COMMITTED for e in es), timeout=60)
        assert not [e for e in calm if e.kind in (EventKind.FAST_LOST, EventKind.FAST_DROPPED, EventKind.FAST_GAP,
                                                   EventKind.FAST_ENDED_EARLY)], calm

        # The measure can fail: a plain tap in east, beside the collector, pulls every west reply across.
        bare = await nats.connect(sc.url("east").split(","), user="app", password="app-secret")
        pulled = []

        async def pull(msg) -> None:
            pulled.append(msg.subject)

        await bare.subscribe("_INBOX.*.*.*.*.*.*.$FI", cb=pull)
        await flush(bare)
        plain = await _gateway_traffic_for(sc, _fast(clients["west"], "west", "sc-plain-west", gap=False))
        acks = MESSAGES // 10
        assert len(pulled) >= acks
        # Both clusters' batches under the cluster taps, beside one cluster's batch under a plain tap: what
        # crosses with the taps alone is the system account's answers and advisories, a few dozen messages
        said = f"gateways (messages, bytes): {crossed} with the cluster taps, {plain} with a plain tap beside them"
        # (a few dozen; the system account's polls go on while a loaded machine runs the batches: a quarter of
        # one batch's acks still tells the taps from a plain tap's thousand)
        assert crossed[0] < acks // 4 and plain[0] >= acks, said
        assert crossed[1] < plain[1], said  # the answers' and advisories' bytes outweigh acks' small bodies
    finally:
        for nc in [*clients.values(), *([bare] if bare else [])]:
            await nc.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
