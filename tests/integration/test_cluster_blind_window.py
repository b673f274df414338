"""The worst node to lose: the one the collector is connected to, which also leads the advisory stream.
An atomic abandonment on another node a few seconds later is in the event log (heard live once the
collector is back) or inside a recorded blind window: never missing without a word, three times in a row
(ten in a soak)."""

import asyncio
from datetime import datetime, timedelta, timezone

import nats
import pytest

from console.broker.atomic import AtomicBatch
from console.broker.eventlog import EventLog
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.events import EventKind, blind_window
from console.errors import BatchError
from tests.conftest import CLUSTER_LIMITS
from tests.integration.test_cluster_losses import r3_stream, step_down
from tests.waits import eventually, wait_until

pytestmark = pytest.mark.cluster
# (seconds from the kill to the abandonment, runs): 3 s, while the cluster elects new leaders and the
# collector is back on another node (the case an adversarial run found missing; ten times in a soak);
# and at once, before the collector is back and while the advisory stream has no leader: nobody can
# store or hear it.
CASES = [(3.0, 3), (0.0, 3), pytest.param(3.0, 10, marks=pytest.mark.soak)]


async def _lead_on(admin, stream: str, node: str) -> None:
    while await eventually(lambda: admin.leader(stream), lambda _: True, timeout=30, what=f"{stream}'s leader") != node:
        await step_down(admin, stream, preferred=node)


async def _abandon(publisher, subject: str, batch_id: str) -> datetime:
    batch = AtomicBatch(publisher, batch_id=batch_id)
    await eventually(lambda: batch.add(subject, b"1"), lambda _: True, timeout=30, what="the stream answers")
    batch.skip_seq()
    at = datetime.now(timezone.utc)
    with pytest.raises(BatchError):
        await batch.commit(subject, b"3")
    return at


async def _recorded(reader, batch_id: str, at: datetime) -> str | None:
    """'logged' when the abandonment is in the log, 'window' when a blind window covers `at`, else None."""
    events = [e for _, e in await EventLog(reader.jetstream()).read(1, idle_timeout=0.5)]
    if any(e.kind is EventKind.ATOMIC_ABANDONED and e.batch_id == batch_id for e in events):
        return "logged"
    windows = [w for e in events if (w := blind_window(e)) is not None]
    if any(start - timedelta(seconds=1) <= at <= end for start, end in windows):
        return "window"
    return None


@pytest.mark.parametrize("after_the_kill, runs", CASES)
async def test_an_abandonment_after_the_collectors_node_dies_is_logged_or_inside_a_blind_window(
        cluster, after_the_kill, runs):
    client = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    admin = await r3_stream(client, "CL_BLIND", allow_atomic=True)
    outcomes = []
    try:
        for run in range(runs):
            victim = run % 3
            name = f"n{victim + 1}"
            others = [url for i, url in enumerate(cluster.urls) if i != victim]
            watcher = await nats.connect([cluster.urls[victim], *others], max_reconnect_attempts=-1,
                                         reconnect_time_wait=0.2, dont_randomize=True)
            collector = Collector(watcher, CollectorSettings(batch_timeout=CLUSTER_LIMITS.timeout, tick_every=0.1))
            publisher = reader = None
            try:
                await collector.start()
                await _lead_on(admin, "BATCH_CONSOLE_ADVISORIES", name)  # the worst case: both on the victim
                while await admin.leader("CL_BLIND") == name:  # the publisher's stream lives on
                    await step_down(admin, "CL_BLIND", preferred=f"n{(victim + 1) % 3 + 1}")
                await wait_until(lambda: collector.capture.leader == name, timeout=30,
                                 what="the collector knows the advisory stream's leader")
                publisher = await nats.connect(others)
                cluster.kill(victim)
                await asyncio.sleep(after_the_kill)  # the scenario's timing, not a wait for a condition
                batch_id = f"blind-{after_the_kill:g}-{run}"
                at = await _abandon(publisher, "cl_blind.x", batch_id)
                reader = await nats.connect(others)
                outcome = await eventually(lambda: _recorded(reader, batch_id, at), timeout=90,
                                           what=f"run {run}: the abandonment logged or a blind window over it")
                outcomes.append(outcome)
            finally:
                await collector.stop()
                for conn in (watcher, publisher, reader):
                    if conn is not None:
                        await conn.close()
                if not cluster.nodes[victim].running():
                    cluster.restart(victim)
                cluster.wait_for_meta_leader()
    finally:
        await client.close()
    print("outcomes:", outcomes)
    assert len(outcomes) == runs and all(outcomes), outcomes
