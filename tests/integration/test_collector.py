
import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.fast import FastBatch
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.events import LOST_KINDS, EventKind
from tests.conftest import TEST_LIMITS
from tests.waits import events_for, eventually, wait_until


@pytest.fixture
async def client(server):
    conn = await nats.connect(server.url)
    yield conn
    await conn.close()


@pytest.fixture
async def collector(server):
    conn = await nats.connect(server.url)
    c = Collector(conn, CollectorSettings(batch_timeout=TEST_LIMITS.timeout, status_every=0.5, tick_every=0.1))
    await c.start()
    yield c
    await c.stop()
    await conn.close()


async def test_each_abandonment_reason_gives_exactly_one_event(client, collector):
    await client.jetstream().add_stream(StreamConfig(name="ABANDON", subjects=["abandon.>"], allow_atomic=True))
    timeout = AtomicBatch(client, batch_id="r-timeout")
    await timeout.add("abandon.x", b"1")
    timeout.discard()
    gap = AtomicBatch(client, batch_id="r-incomplete")
    await gap.add("abandon.x", b"1")
    gap.skip_seq()
    with pytest.raises(Exception):
        await gap.commit("abandon.x", b"3")
    large = AtomicBatch(client, batch_id="r-large", max_msgs=1000)
    for _ in range(100):
        await large.add("abandon.x", b"x")
    with pytest.raises(Exception):
        await large.commit("abandon.x", b"x")
    with pytest.raises(Exception):
        await AtomicBatch(client, batch_id="r-unsupported").add("abandon.x", b"1", headers={"Nats-Required-Api-Level": "99"})

    ids = {"r-timeout", "r-incomplete", "r-large", "r-unsupported"}
    events = await events_for(client, ids, lambda es: {e.batch_id for e in es} == ids)
    assert sorted((e.batch_id, e.reason, e.stream) for e in events) == [
        ("r-incomplete", "incomplete", "ABANDON"),
        ("r-large", "large", "ABANDON"),
        ("r-timeout", "timeout", "ABANDON"),
        ("r-unsupported", "unsupported", "ABANDON"),
    ]
    assert all(e.kind is EventKind.ATOMIC_ABANDONED for e in events)
    assert collector.advisories_durable


async def test_an_idle_fast_batch_is_inferred_dropped_when_its_rate_said_an_ack_was_due(client, collector):
    await client.jetstream().add_stream(StreamConfig(name="IDLE", subjects=["idle.>"], allow_batched=True))
    batch = FastBatch(client, flow=10)
    for _ in range(25):  # acks at 10 and 20 in milliseconds: one was due long before the timeout
        await batch.add("idle.x", b"x")
    await batch.close()
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.FAST_DROPPED for e in es))
    [dropped] = [e for e in events if e.kind is EventKind.FAST_DROPPED]
    assert dropped.inferred


async def test_a_fast_batch_with_one_ack_then_silence_is_slow_not_dropped(client, collector):
    """One ack tells no rate: a producer slower than its flow looks the same. Cannot tell, so no loss."""
    await client.jetstream().add_stream(StreamConfig(name="QUIET", subjects=["quiet.>"], allow_batched=True))
    batch = FastBatch(client, flow=100)
    await batch.add("quiet.x", b"x")
    await batch.close()
    events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.FAST_SLOW for e in es))
    assert not [e for e in events if e.kind in LOST_KINDS]


async def test_a_fast_batch_refused_for_too_many_in_flight_is_fast_rejected_once(client, collector):
    from console.errors import TooManyInflightError

    await client.jetstream().add_stream(StreamConfig(name="BUSY", subjects=["busy.>"], allow_batched=True))
    open_batches = [FastBatch(client, flow=10) for _ in range(TEST_LIMITS.max_inflight_per_stream)]
    for batch in open_batches:
        await batch.add("busy.x", b"x")
    refused = FastBatch(client, flow=10)
    with pytest.raises(TooManyInflightError):
        await refused.add("busy.x", b"x")
    for batch in open_batches:
        await batch.close()
    events = await events_for(client, {refused.batch_id}, lambda es: any(e.kind is EventKind.FAST_REJECTED for e in es))
    [rejected] = [e for e in events if e.kind is EventKind.FAST_REJECTED]
    assert (rejected.stream, rejected.err_code) == ("BUSY", 10211)
    assert not [e for e in events if e.kind is EventKind.FAST_ERROR]  # said once, as a rejection


async def test_garbage_is_counted_and_the_good_events_around_it_are_stored(client, collector):
    await client.jetstream().add_stream(StreamConfig(name="GARBAGE", subjects=["garbage.>"], allow_atomic=True))
    before = AtomicBatch(client, batch_id="before-garbage")
    await before.add("garbage.x", b"1")
    before.discard()
    await client.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.GARBAGE", b"{not json")
    await client.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.GARBAGE", b'{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned"}')
    from_the_future = (b'{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"future1",'
                       b'"timestamp":"2100-01-01T00:00:00Z","stream":"GARBAGE","batch":"later","reason":"timeout"}')
    await client.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.GARBAGE", from_the_future)  # would skew Live
    await client.publish("_INBOX.x.b.10.ok.1.9.$FI", b'{"type":"ack","seq":0,"msgs":10}')
    await client.publish("_INBOX.x.b.10.ok.1.0.$FI", b"garbage")
    after = AtomicBatch(client, batch_id="after-garbage")
    await after.add("garbage.x", b"1")
    after.discard()
    events = await events_for(client, {"before-garbage", "after-garbage"}, lambda es: len(es) == 2)
    assert {e.reason for e in events} == {"timeout"}
    status = await collector.status()
    assert status.fast_paths_off == ()  # on the nats-py release pyproject.toml pins, every fast path is on
    assert status.rejected["fi_tap: op '9' is not one of 0-4"] == 1
    assert status.rejected["fi_tap: not JSON"] == 1
    assert sum(n for reason, n in status.rejected.items() if reason.startswith("advisory")) == 3
    kept = {m.data: (m.headers["Batch-Console-Source"], m.headers["Batch-Console-Reason"]) for m in await quarantined(client, 5)}
    assert kept[b"{not json"] == ("advisory", "not JSON")
    assert kept[b"garbage"] == ("fi_tap", "not JSON")
    assert kept[from_the_future][1].startswith("timestamp in the future")
    assert status.healthy is True and status.quarantined == 5


async def quarantined(client, count: int, timeout: float = 10.0) -> list:
    """The first `count` inputs the quarantine kept, raw, with their reasons in headers."""
    js = client.jetstream()
    await eventually(lambda: js.stream_info("BATCH_CONSOLE_QUARANTINE"), lambda info: info.state.messages >= count,
                     timeout, "quarantined")
    return [await js.get_msg("BATCH_CONSOLE_QUARANTINE", seq) for seq in range(1, count + 1)]


async def test_consumers_on_the_consoles_own_streams_are_not_context(client, collector):
    """A reader of the event log (the analytics job's partitions, say) makes consumer advisories on it:
    kept as context they would be history of nothing and wake `analytics --follow` into a loop."""
    from nats.js.api import ConsumerConfig

    from console.broker.eventlog import EventLog

    js = client.jetstream()
    await js.add_stream(StreamConfig(name="USERCTX", subjects=["userctx.>"]))
    for stream in ("BATCH_CONSOLE_EVENTS", "USERCTX"):
        await js.add_consumer(stream, ConsumerConfig(durable_name=f"reader-{stream.lower()}"))
        await js.delete_consumer(stream, f"reader-{stream.lower()}")

    async def context_streams():
        return {e.stream for _, e in await EventLog(js).read(1, idle_timeout=0.2)
                if e.kind is EventKind.CONTEXT and e.detail.startswith("consumer_action")}

    await eventually(context_streams, lambda seen: "USERCTX" in seen, what="the user stream's consumer as context")
    await wait_until(lambda: collector.ignored["the console's own streams"] >= 2,
                     what="both advisories of the event log's reader counted as ignored")
    assert "BATCH_CONSOLE_EVENTS" not in await context_streams()


async def test_a_long_flood_of_garbage_does_not_push_out_the_first_evidence_of_each_reason(server, client):
    """The newest inputs are kept in a bounded stream (here 20): a flood of one reason evicts an earlier
    hostile input from it, but the first inputs of each reason stay in the stream kept apart."""
    from dataclasses import replace

    from console.broker.quarantine import QuarantineSettings

    settings = replace(QuarantineSettings(), stream="QFLOOD", subject_prefix="qflood.newest", max_msgs=20,
                       first_stream="QFLOOD_FIRST", first_prefix="qflood.first", first_per_reason=3, per_second=1e6)
    conn = await nats.connect(server.url)
    flooded = Collector(conn, CollectorSettings(tick_every=0.1), quarantine=settings)
    await flooded.start()
    js = client.jetstream()
    try:
        await client.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.EARLY", b"[1, 2, 3]")  # the evidence
        await eventually(lambda: flooded.status(), lambda s: s.quarantined == 1, what="the evidence kept")
        for n in range(200):
            await client.publish("_INBOX.x.b.10.ok.1.0.$FI", b"garbage %d" % n)
        await eventually(lambda: flooded.status(), lambda s: s.quarantined >= 201, what="everything offered")
        # All 201 stored (counted as offered is not yet stored): no later one evicts what is read below.
        newest = await eventually(lambda: js.stream_info("QFLOOD"),
                                  lambda i: i.state.last_seq >= 201 and i.state.messages == 20)
        kept = [await js.get_msg("QFLOOD", seq) for seq in range(newest.state.first_seq, newest.state.last_seq + 1)]
        assert b"[1, 2, 3]" not in [m.data for m in kept]  # pushed out of the newest
        first = await eventually(lambda: js.stream_info("QFLOOD_FIRST"), lambda i: i.state.messages == 4)
        apart = [await js.get_msg("QFLOOD_FIRST", seq) for seq in range(1, first.state.last_seq + 1)]
        assert [m.data for m in apart] == [b"[1, 2, 3]", b"garbage 0", b"garbage 1", b"garbage 2"]
        assert apart[0].headers["Batch-Console-Reason"] == "not a JSON object"
    finally:
        await flooded.stop()
        await conn.close()


async def test_the_taps_are_not_paced_while_replies_wait_for_their_turn(client, collector):
    """Pacing lets one read take many acks while the collector keeps up; behind a flood it would hold a
    real loss behind every reply before it."""
    import asyncio
    import time

    from console.collector.tap_reader import PACED_UP_TO

    held, seen = asyncio.Event(), []

    async def slow(msg) -> None:  # replies read and waiting: their handler is busy
        seen.append(msg)
        await held.wait()

    taps = collector.taps
    await taps.subs.follow(client, "pace.flood", slow)
    taps._last_tap = time.monotonic()  # replies flowing: paced while nothing waits
    assert taps.paces()
    for _ in range(PACED_UP_TO + 500):
        await client.publish("pace.flood", b"x")
    await client.flush()
    await wait_until(lambda: taps.subs.backlog() >= PACED_UP_TO, 10, "the replies waiting")
    taps._last_tap = time.monotonic()
    assert not taps.paces()  # behind: not paced
    held.set()
    await wait_until(lambda: taps.subs.backlog() == 0, 10, "the replies handled")
    taps._last_tap = time.monotonic()
    assert taps.paces() and len(seen) == PACED_UP_TO + 500


FORGED = {  # a forger's replies for batch ids nobody published: (subject's tail, body)
    "starts' acks": ("10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}'),
    "gaps": ("10.ok.5.1.$FI", b'{"type":"gap","last_seq":1,"seq":5}'),
}


@pytest.mark.parametrize("kind", FORGED)
async def test_a_forgers_flood_of_new_batch_ids_crowds_no_real_loss_out_of_the_event_log(server, client, kind):
    """Each forged reply of a new batch id past the forger's share was an event ("not tracked: tracker full",
    or a gap said without state): a flood of them filled the writer's queue, and real events were refused
    behind it (and forged gaps filled the log with losses)."""
    tail, body = FORGED[kind]
    conn = await nats.connect(server.url)
    c = Collector(conn, CollectorSettings(batch_timeout=TEST_LIMITS.timeout, status_every=0.5, tick_every=0.1,
                                          max_tracked_batches=40, max_queued_events=200))
    await c.start()
    try:
        await client.jetstream().add_stream(StreamConfig(name="FORGED", subjects=["forged.>"], allow_batched=True))
        for i in range(5000):  # one client's forged replies, under one inbox prefix
            await client.publish(f"_INBOX.forger.f{i}.{tail}", body)
        batch = FastBatch(client, flow=10, gap_mode="fail")  # then a real loss
        for i in range(20):
            if i == 10:
                batch.skip_seq()
            try:
                await batch.add("forged.x", b"x")
            except Exception:
                break
        await wait_until(lambda: c.taps.tapped >= 5000, 30, "the flood read")
        events = await events_for(client, {batch.batch_id}, lambda es: any(e.kind is EventKind.FAST_GAP for e in es))
        assert [e.lost for e in events if e.kind is EventKind.FAST_GAP] == [1]
        status = await c.status()
        assert "event queue full" not in status.rejected
        untracked = status.batches_untracked if kind == "starts' acks" else sum(status.unsaid_by_prefix.values())
        assert untracked >= 4000 and status.batches_tracked <= 40
        assert status.events_written < 1000  # starts: 10 a second; losses of batches never tracked: 100
    finally:
        await c.stop()
        await conn.close()
