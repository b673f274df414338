"""The loss ledger on every server release the console supports: the same batches, published by the
console's own publishers and followed by a real collector, on 2.12.8, 2.14.6 and 2.15.1 (and a leader
change on a three-node cluster of each). What each release gives is written down below, per release:
a release that starts to answer otherwise fails here, and the table is the README's."""

from __future__ import annotations

import nats
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from console.broker.admin import StreamAdmin
from console.broker.atomic import AtomicBatch
from console.broker.cluster import EmbeddedCluster
from console.broker.fast import FastBatch
from console.broker.server import EmbeddedServer
from console.broker.server_info import varz_from_monitor
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.broker.eventlog import EventLog
from console.domain.batch_limits import BatchLimits
from console.domain.checks import Facts, evaluate, window_counts
from console.domain.events import EventKind
from console.errors import BatchError, TooManyInflightError
from console.ui.stream import release_risks
from console.ui.streams import StreamsPage
from tests.conftest import CLUSTER_LIMITS, TEST_LIMITS
from tests.integration.test_cluster_losses import open_atomic_batch, step_down
from tests.server_versions import VERSIONS, binary
from tests.waits import eventually, events_for, wait_until

NO_FAST_INGEST = "stream refused: 10025 unknown field allow_batched"
# scenario -> release -> what the publisher was told and what the ledger holds, in a line
EXPECTED = {
    "atomic_abandoned": {
        "2.12.8": "incomplete, large, timeout; required API level: publisher 10185, no advisory",
        "2.14.6": "incomplete, large, timeout, unsupported",
        "2.15.1": "incomplete, large, timeout, unsupported",
    },
    "fast_gap_ok": {
        "2.12.8": NO_FAST_INGEST,
        "2.14.6": "gap 12+3, committed 32",
        "2.15.1": "gap 12+3, committed 32",
    },
    "fast_gap_fail": {
        "2.12.8": NO_FAST_INGEST,
        "2.14.6": "gap 12+3, ended early 11",
        "2.15.1": "gap 12+3, ended early 11",
    },
    "fast_dropped": {
        "2.12.8": NO_FAST_INGEST,
        "2.14.6": "dropped (inferred)",
        "2.15.1": "dropped (inferred)",
    },
}


@pytest.fixture(scope="module", params=VERSIONS)
def release(request, tmp_path_factory):
    with EmbeddedServer(tmp_path_factory.mktemp(f"v{request.param}"), batch_limits=TEST_LIMITS,
                        binary=binary(request.param), monitor_port=0) as server:
        yield request.param, server


@pytest.fixture
async def client(release):
    conn = await nats.connect(release[1].url)
    yield conn
    await conn.close()


@pytest.fixture
async def collector(release):
    conn = await nats.connect(release[1].url)
    c = Collector(conn, CollectorSettings(batch_timeout=TEST_LIMITS.timeout, status_every=0.5, tick_every=0.1))
    await c.start()
    yield c
    await c.stop()
    await conn.close()


async def fast_stream(client, name: str) -> str | None:
    """The stream's subject, or what the release said when it refused a stream that allows fast batches."""
    try:
        await client.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], allow_batched=True))
    except nats.js.errors.BadRequestError as e:
        assert e.err_code == 10025 and "allow_batched" in e.description
        return None
    return name.lower()


async def test_atomic_abandonment_of_each_reason(release, client, collector):
    version, _ = release
    await client.jetstream().add_stream(StreamConfig(name="V_ABANDON", subjects=["v_abandon.>"], allow_atomic=True))
    told = ""
    try:
        await AtomicBatch(client, batch_id="v-unsupported").add("v_abandon.x", b"1",
                                                               headers={"Nats-Required-Api-Level": "99"})
    except BatchError as e:
        told = f"publisher {e.err_code}"
    gap = AtomicBatch(client, batch_id="v-incomplete")
    await gap.add("v_abandon.x", b"1")
    gap.skip_seq()
    with pytest.raises(BatchError):
        await gap.commit("v_abandon.x", b"3")
    large = AtomicBatch(client, batch_id="v-large", max_msgs=1000)
    for _ in range(TEST_LIMITS.max_msgs):
        await large.add("v_abandon.x", b"x")
    with pytest.raises(BatchError):
        await large.commit("v_abandon.x", b"x")
    timeout = AtomicBatch(client, batch_id="v-timeout")  # last: the others' advisories are in before it
    await timeout.add("v_abandon.x", b"1")
    timeout.discard()
    ids = {"v-unsupported", "v-incomplete", "v-large", "v-timeout"}
    events = await events_for(client, ids, lambda es: "v-timeout" in {e.batch_id for e in es})
    assert {e.kind for e in events} == {EventKind.ATOMIC_ABANDONED} and {e.stream for e in events} == {"V_ABANDON"}
    reasons = sorted(e.reason for e in events)
    seen = ", ".join(reasons) + ("" if "unsupported" in reasons else f"; required API level: {told}, no advisory")
    assert seen == EXPECTED["atomic_abandoned"][version]


@pytest.mark.parametrize("mode", ["ok", "fail"])
async def test_fast_gap_in_each_mode(release, client, collector, mode):
    version, _ = release
    subject = await fast_stream(client, f"V_GAP_{mode.upper()}")
    if subject is None:
        assert EXPECTED[f"fast_gap_{mode}"][version] == NO_FAST_INGEST
        return
    batch = FastBatch(client, flow=5, gap_mode=mode)
    try:
        for seq in range(1, 30):
            if seq == 12:
                batch.skip_seq(3)
            await batch.add(f"{subject}.x", b"x")
        await batch.commit_eob()
    except BatchError:
        pass
    ends = {EventKind.FAST_COMMITTED: "committed", EventKind.FAST_ENDED_EARLY: "ended early"}
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind in ends for e in es))
    gaps = [f"gap {e.first_lost_seq}+{e.lost}" for e in events if e.kind is EventKind.FAST_GAP]
    end = [f"{ends[e.kind]} {e.count}" for e in events if e.kind in ends]
    assert ", ".join(gaps + end) == EXPECTED[f"fast_gap_{mode}"][version]
    assert (events[0].kind, events[0].flow) == (EventKind.FAST_STARTED, 5)
    assert {e.gap_mode for e in events if e.kind is EventKind.FAST_GAP} == {mode}
    assert {e.stream for e in events if e.kind in ends} == {f"V_GAP_{mode.upper()}"}  # the gap reply names none


async def test_a_fast_batch_dropped(release, client, collector):
    version, _ = release
    subject = await fast_stream(client, "V_IDLE")
    if subject is None:
        assert EXPECTED["fast_dropped"][version] == NO_FAST_INGEST
        return
    batch = FastBatch(client, flow=10)
    for _ in range(25):  # acks at 10 and 20 within milliseconds: one was due long before the timeout
        await batch.add(f"{subject}.x", b"x")
    await batch.close()
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.FAST_DROPPED for e in es))
    [dropped] = [e for e in events if e.kind is EventKind.FAST_DROPPED]
    assert f"dropped{' (inferred)' if dropped.inferred else ''}" == EXPECTED["fast_dropped"][version]


async def test_a_tapped_atomic_batch_over_the_in_flight_limit_is_rejected_whatever_the_release_calls_it(release,
                                                                                                         client):
    """The refusal goes to the publisher's inbox (10210; 10176 on 2.12): the tap follows that connection's
    replies from its first batch, and the console's publisher raises TooManyInflightError for both."""
    version, server = release
    await client.jetstream().add_stream(StreamConfig(name="V_CROWD", subjects=["v_crowd.>"], allow_atomic=True))
    conn = await nats.connect(server.url)
    tapping = Collector(conn, CollectorSettings(batch_timeout=TEST_LIMITS.timeout, tick_every=0.1,
                                                tap_publish_subjects=("v_crowd.>",)))
    await tapping.start()
    try:
        open_batches = [AtomicBatch(client) for _ in range(TEST_LIMITS.max_inflight_per_stream)]
        for batch in open_batches:
            await batch.add("v_crowd.x", b"1")
        await wait_until(lambda: tapping.atomic.replies_followed, timeout=15, what="the publisher's replies followed")
        refused = AtomicBatch(client)
        with pytest.raises(TooManyInflightError) as told:
            await refused.add("v_crowd.x", b"1")
        events = await events_for(client, {refused.batch_id},
                                  lambda es: any(e.kind is EventKind.ATOMIC_REJECTED for e in es))
    finally:
        await tapping.stop()
        await conn.close()
    [rejected] = [e for e in events if e.kind is EventKind.ATOMIC_REJECTED]
    assert (rejected.stream, rejected.err_code, told.value.err_code) == ("V_CROWD", *[IN_FLIGHT_REFUSAL[version]] * 2)
    # the refused one never opened (the others may have timed out meanwhile: the batch timeout is short here)
    assert refused.batch_id not in tapping.atomic.tracker.batches
    assert tapping.atomic.tracker.open_on("V_CROWD") <= len(open_batches)


IN_FLIGHT_REFUSAL = {"2.12.8": 10176, "2.14.6": 10210, "2.15.1": 10210}


# -- what the console offers and warns of, per release ------------------------------------------

async def test_the_console_offers_only_what_the_release_has_and_warns_of_what_it_gets_wrong(release, client):
    version, server = release
    page = StreamsPage(admin=StreamAdmin(client))
    await page.reload()
    assert page.server.version == version
    limits = BatchLimits.from_varz(await varz_from_monitor(server.monitor_url)).rows()
    per_server = next(row for row in limits if row["limit"] == "open batches per server")
    await client.jetstream().add_stream(StreamConfig(name="V_WARN", subjects=["v_warn.>"], allow_atomic=True))
    risks = release_risks(page.server, (await StreamAdmin(client).stream("V_WARN")).settings)
    if version == "2.12.8":
        assert page.server.api_level == 3
        assert page.no_batched == ("allow_batched: nats-server 2.12.8 has no fast ingest: allow_batched needs 2.14 "
                                   "or later (API level 4)")
        assert (per_server["atomic"], per_server["fast"]) == ("not reported by 2.12.8", "no fast ingest in 2.12.8")
        titles = ["a batch sequence that is not a number is called too large",
                  "a batch over the in-flight limit is called incomplete",
                  "fast-ingest messages to a server without fast ingest are stored as plain messages"]
        assert [r.startswith(f"nats-server 2.12.8: {t}. ADR-50: ") for r, t in zip(risks, titles)] == [True] * 3
        assert len(risks) == 3
    else:
        assert page.server.api_level >= 4 and page.no_batched == "" and risks == []
        assert (per_server["atomic"], per_server["fast"]) == ("1,000", "50,000")


# -- a leader change on three nodes ---------------------------------------------------------------

# A leader change races the messages in flight: a new leader that has them all carries the batch on
# (the publisher waited for its flow acks, as FastBatch does: the usual case), one that lacks some
# says so with a gap and, in fail mode, a final PubAck (scripts/repro/fast_fail_mode_across_leader_change.py).
CARRIED_ON = "committed / fast_committed 60"
# Under load the election can outlast the 5 s batch timeout: the server drops the batch, the publisher
# hears nothing (its ack timeout) and the console says dropped. A commit the console calls dropped still fails.
SILENT = "BatchTimeoutError / fast_dropped"
# Or no leader at all when the publisher's next message goes out (a 503, seen in CI under load): the same drop.
LEADERLESS = "NoRespondersError / fast_dropped"
FAST_ACROSS = {CARRIED_ON, "BatchEndedError / fast_gap, fast_ended_early", "committed / fast_gap, fast_committed 60",
               SILENT, LEADERLESS}
LEADER_CHANGE = {  # release -> what a fast batch in fail mode, one in ok mode and a tapped atomic batch give
    "2.12.8": ({NO_FAST_INGEST}, {NO_FAST_INGEST}, "commit 10176 / atomic_lost leader_change"),
    "2.14.6": (FAST_ACROSS, FAST_ACROSS, "commit 10176 / atomic_lost leader_change"),
    "2.15.1": (FAST_ACROSS, FAST_ACROSS, "commit 10176 / atomic_lost leader_change"),
}


@pytest.fixture(scope="module", params=VERSIONS)
def release_cluster(request, tmp_path_factory):
    with EmbeddedCluster(tmp_path_factory.mktemp(f"c{request.param}"), 3, batch_limits=CLUSTER_LIMITS,
                         binary=binary(request.param)) as cluster:
        yield request.param, cluster


async def r3(client, name: str, **flags) -> StreamAdmin | None:
    """The stream's admin once it has a leader; None when the release has no such flag."""
    admin = StreamAdmin(client)

    async def created() -> bool:
        try:
            await client.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"],
                                                             num_replicas=3, **flags))
        except nats.js.errors.BadRequestError as e:
            if "allow_batched" in (e.description or ""):
                return False  # refused for good
            raise
        return True

    if not await eventually(created, lambda made: made is not None, what=f"{name} created", timeout=30):
        return None
    await eventually(lambda: admin.leader(name), what=f"{name} has a leader", timeout=30)
    return admin


@pytest.mark.cluster
async def test_a_leader_change_on_three_nodes(release_cluster):
    version, cluster = release_cluster
    client = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    conn = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    await eventually(lambda: r3(client, "V_READY"), lambda admin: admin is not None, timeout=30,
                     what="the new cluster places a replicated stream")  # before the collector makes its own
    collector = Collector(conn, CollectorSettings(batch_timeout=CLUSTER_LIMITS.timeout, tick_every=0.1,
                                                  tap_publish_subjects=("v_lead_atomic.>",)))
    await collector.start()
    try:
        seen = [await fast_across(client, mode) for mode in ("fail", "ok")]
        seen.append(await atomic_across(client, collector))
        # What the health check on leader changes makes of this cluster's event log
        events = [e for _, e in await EventLog(client.jetstream()).read(1, idle_timeout=0.5)]
        report = evaluate(Facts(counts=window_counts(events)), codes=["BATCH_011"])
    finally:
        await collector.stop()
        await conn.close()
        await client.close()
    fail, ok, atomic = LEADER_CHANGE[version]
    assert seen[0] in fail and seen[1] in ok and seen[2] == atomic, seen
    assert "V_LEAD_ATOMIC" in {f.stream for f in report.findings if f.code == "BATCH_011"}


async def fast_across(client, mode: str) -> str:
    name = f"V_LEAD_{mode.upper()}"
    admin = await r3(client, name, allow_batched=True)
    if admin is None:
        return NO_FAST_INGEST
    subject = f"{name.lower()}.x"
    batch = FastBatch(client, flow=10, gap_mode=mode, ack_timeout=10)
    for _ in range(30):
        await batch.add(subject, b"before")
    await step_down(admin, name)
    told = "committed"
    try:
        for _ in range(29):
            await batch.add(subject, b"after")
        await batch.commit(subject, b"last")
    except BatchError as e:
        told = str(getattr(e, "err_code", type(e).__name__))
    wanted = (EventKind.FAST_LOST, EventKind.FAST_COMMITTED, EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED)
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind in wanted for e in es), timeout=30)
    detail = {EventKind.FAST_COMMITTED: lambda e: f" {e.count}", EventKind.FAST_LOST: lambda e: f" {e.reason}"}
    lines = [e.kind.value + detail.get(e.kind, lambda e: "")(e) for e in events if e.kind in (*wanted, EventKind.FAST_GAP)]
    return f"{told} / " + ", ".join(lines)


async def atomic_across(client, collector) -> str:

    name = "V_LEAD_ATOMIC"
    admin = await r3(client, name, allow_atomic=True)
    batch = await open_atomic_batch(client, collector, "v_lead_atomic.x")
    await eventually(lambda: _open_on(collector, name), timeout=15, what="the tap saw the open batch")
    await step_down(admin, name)
    told = "committed"
    try:
        await batch.commit("v_lead_atomic.x", b"end")
    except BatchError as e:
        told = f"commit {e.err_code}"
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.ATOMIC_LOST for e in es),
                              timeout=30)
    return f"{told} / " + ", ".join(f"{e.kind.value} {e.reason}" for e in events if e.kind is EventKind.ATOMIC_LOST)


async def _open_on(collector, stream: str):
    return collector.atomic.tracker.open_on(stream)
