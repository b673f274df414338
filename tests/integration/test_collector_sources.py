"""The collector's other inputs: the system account, the server's own limits, denied permissions,
the publish side, and what two concurrent fast batches show."""

import asyncio

import nats
import nats.aio.client
import pytest
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.fast import FastBatch
from console.broker.server import EmbeddedServer
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.events import EventKind
from tests.conftest import TEST_LIMITS
from tests.waits import events_for, wait_until

ACCOUNTS = """
accounts {
  APP { jetstream: enabled, users: [{user: app, password: app-secret}] }
  LIM { jetstream: enabled, users: [
    {user: lim-app, password: lim-app-secret},
    {user: limited, password: limited-secret, permissions: {
      publish: { deny: ["$JS.API.STREAM.CREATE.BATCH_CONSOLE_ADVISORIES"] },
      subscribe: { deny: ["_INBOX.*.*.*.*.*.$FI"] } } }
  ] }
  SYS { users: [{user: sys, password: sys-secret}] }
}
system_account: SYS
"""


@pytest.fixture(scope="module")
def accounts_server(tmp_path_factory):
    with EmbeddedServer(tmp_path_factory.mktemp("accounts"), batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as s:
        yield s


async def connect_as(server, user, password, **kw):
    return await nats.connect(server.url, user=user, password=password, **kw)


async def test_system_copy_and_account_copy_make_one_event(accounts_server):
    app = await connect_as(accounts_server, "app", "app-secret")
    sys_nc = await connect_as(accounts_server, "sys", "sys-secret")
    collector = Collector(app, CollectorSettings(tick_every=0.1), system_nc=sys_nc)
    await collector.start()
    try:
        await app.jetstream().add_stream(StreamConfig(name="TWOCOPIES", subjects=["twocopies.>"], allow_atomic=True))
        batch = AtomicBatch(app, batch_id="seen-twice")
        await batch.add("twocopies.x", b"1")
        batch.skip_seq()
        with pytest.raises(Exception):
            await batch.commit("twocopies.x", b"3")
        [event] = await events_for(app, {"seen-twice"}, lambda es: len(es) >= 1)
        assert (event.kind, event.reason, event.stream) == (EventKind.ATOMIC_ABANDONED, "incomplete", "TWOCOPIES")
        assert (event.source, event.unverified) == ("system_advisory", False)
        # A client of the account forges an abandonment: only the account side ever sees it.
        forged = ('{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"forgedAdvisory0001",'
                  '"timestamp":"2026-11-21T02:47:57Z","stream":"TWOCOPIES","batch":"never-was","reason":"timeout"}')
        await app.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.TWOCOPIES", forged.encode())
        [fake] = await events_for(app, {"never-was"}, lambda es: len(es) >= 1)
        assert (fake.source, fake.unverified) == ("account_advisory", True)
        # The advisory stream is read in order: the real one's account copy came before, and made no second event.
        assert len(await events_for(app, {"seen-twice"}, lambda es: len(es) >= 1)) == 1
        status = await collector.status()
        assert (status.batch_timeout, status.batch_timeout_source) == (1.0, "the system account's /varz")
    finally:
        await collector.stop()
        await app.close()
        await sys_nc.close()


async def test_batch_timeout_is_learned_from_the_monitor_port(nats_server, nc):
    collector = Collector(nc, CollectorSettings(), monitor_url=nats_server.monitor_url)
    await collector.start()
    await collector.stop()
    assert collector.tracker.batch_timeout == 1.0
    assert collector.batch_timeout_source.endswith("/varz")


async def test_denied_permissions_are_reported_and_the_collector_runs_with_what_it_has(accounts_server):
    collector = None

    async def error_cb(e):
        if collector is not None:
            collector.note_connection_error(e)

    limited = await connect_as(accounts_server, "limited", "limited-secret", error_cb=error_cb)
    app = await connect_as(accounts_server, "lim-app", "lim-app-secret")
    collector = Collector(limited, CollectorSettings(tick_every=0.1))
    try:
        await collector.start()
        await limited.flush()
        status = await collector.status()
        assert status.advisories_durable is False
        # refused at once and said so (nats-py lets a denied request wait out its timeout, four times)
        assert any("live-only" in p and 'permissions violation for publish to "$js.api.stream.create' in p.lower()
                   for p in status.problems), status.problems
        await wait_until(lambda: any("permissions violation for subscription" in p.lower() for p in collector.problems))
        # what it may still do, it does: live advisories into the event log
        await app.jetstream().add_stream(StreamConfig(name="LIMITED", subjects=["limited.>"], allow_atomic=True))
        batch = AtomicBatch(app, batch_id="seen-live")
        await batch.add("limited.x", b"1")
        batch.discard()
        [event] = await events_for(app, {"seen-live"}, lambda es: len(es) >= 1)
        assert event.reason == "timeout"
    finally:
        await collector.stop()
        await limited.close()
        await app.close()


async def test_publish_side_tap_names_the_stream_early_and_keeps_a_slow_batch_alive(nc, make_stream):
    stream, subject = await make_stream(allow_batched=True)
    collector = Collector(nc, CollectorSettings(batch_timeout=1.0, tick_every=0.1, tap_publish_subjects=(f"{subject}.>",)))
    await collector.start()
    try:
        batch = FastBatch(nc, flow=500)
        for _ in range(4):  # slower than the timeout lets acks come (flow 500), faster than the server's timeout
            await batch.add(f"{subject}.slow", b"x")
            await asyncio.sleep(0.6)
        await batch.commit_eob()
        events = await events_for(nc, {batch.batch_id}, lambda es: any(e.kind is EventKind.FAST_COMMITTED for e in es))
        assert EventKind.FAST_DROPPED not in [e.kind for e in events]
        progress = [e for e in events if e.kind is EventKind.FAST_PROGRESS]
        assert progress and all(e.stream == stream for e in progress)  # known before the PubAck
        assert events[0].detail == f"seen publishing on {subject}.slow"
    finally:
        await collector.stop()


async def test_two_concurrent_fast_batches_show_the_flow_changes_the_server_made(nc, make_stream):
    _, subject = await make_stream(allow_batched=True)
    collector = Collector(nc, CollectorSettings(batch_timeout=1.0, tick_every=0.1))
    await collector.start()
    try:
        first, second = FastBatch(nc, flow=500), FastBatch(nc, flow=500)
        for _ in range(1001):
            await first.add(f"{subject}.a", b"x")
        await second.add(f"{subject}.b", b"x")
        for _ in range(1500):
            await first.add(f"{subject}.a", b"x")
            await second.add(f"{subject}.b", b"x")
        await second.commit_eob()
        await first.commit_eob()
        ids = {first.batch_id, second.batch_id}
        events = await events_for(nc, ids, lambda es: sum(e.kind is EventKind.FAST_COMMITTED for e in es) == 2)
        changes = {b: [(e.previous_flow, e.flow) for e in events if e.batch_id == b and e.kind is EventKind.FAST_FLOW_CHANGED]
                   for b in ids}
        assert changes[second.batch_id][:3] == [(1, 2), (2, 4), (4, 8)]
        assert (500, 250) in changes[first.batch_id]
        assert [(ack_seq_old, new) for _, ack_seq_old, new in second.flow_changes][1:4] == changes[second.batch_id][:3]
    finally:
        await collector.stop()


async def _lose_a_fast_batch(nc, subject: str) -> str:
    """A fail-mode fast batch with a gap at its 10th message: the server ends it."""
    from console.broker.fast import BatchEndedError

    batch = FastBatch(nc, flow=5, gap_mode="fail")
    try:
        for seq in range(1, 21):
            if seq == 10:
                batch.skip_seq(2)
            await batch.add(subject, b"x")
        await batch.commit_eob()
    except BatchEndedError:
        pass
    return batch.batch_id


async def test_every_fast_loss_names_its_publisher_as_connz_knows_it(accounts_server):
    app = await connect_as(accounts_server, "app", "app-secret")
    sys_nc = await connect_as(accounts_server, "sys", "sys-secret")
    writers = {name: await connect_as(accounts_server, "app", "app-secret", name=name)
               for name in ("orders-writer", "billing-writer")}
    collector = Collector(app, CollectorSettings(tick_every=0.1), system_nc=sys_nc)
    await collector.start()
    try:
        lost = {}
        for i, (name, nc) in enumerate(writers.items()):
            await app.jetstream().add_stream(StreamConfig(name=f"WHO{i}", subjects=[f"who{i}.>"], allow_batched=True))
            lost[await _lose_a_fast_batch(nc, f"who{i}.x")] = (name, nc)
        events = await events_for(app, set(lost), lambda es: {e.batch_id for e in es
                                                              if e.kind is EventKind.FAST_ENDED_EARLY} == set(lost))
        for event in events:
            name, nc = lost[event.batch_id]
            assert event.publisher is not None, event
            assert (event.publisher.name, event.publisher.lang, event.publisher.version) == (
                name, "python3", nats.aio.client.__version__)
            assert (event.publisher.user, event.publisher.account) == ("app", "APP")
            assert event.publisher.cid == nc.client_id
        status = await collector.status()
        assert (status.publishers_known, status.connz_requests, status.publisher_note) == (2, 2, "")
    finally:
        await collector.stop()
        for nc in (app, sys_nc, *writers.values()):
            await nc.close()


async def test_without_the_system_account_the_publisher_is_unknown_and_said_so(nats_server, nc):
    collector = Collector(nc, CollectorSettings(tick_every=0.1))
    await collector.start()
    await collector.stop()
    status = await collector.status()
    assert (status.publisher_note, status.connz_requests) == ("publisher unknown: no system account", 0)
