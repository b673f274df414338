from datetime import datetime, timedelta, timezone

from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.signing import signature
from console.broker.live_state import LiveState
from console.domain.events import BatchEvent, EventKind
from tests.waits import wait_until


async def test_backfills_recent_events_then_follows_live(nc):
    settings = EventLogSettings(stream="LIVE_A", subject_prefix="live_a")
    log = EventLog(nc.jetstream(), settings)
    await log.ensure()
    now = datetime.now(timezone.utc)
    await log.append([BatchEvent("old", EventKind.ATOMIC_ABANDONED, now - timedelta(hours=3), "S", "old", reason="timeout")])
    await log.append([BatchEvent("recent", EventKind.ATOMIC_ABANDONED, now, "S", "recent", reason="large")])
    state = LiveState(nc, settings, backfill=timedelta(seconds=30))
    state.start()
    try:
        # the backfill window is measured on the log's stored times, which are all "now" here
        await wait_until(lambda: state.model.lost_batches() == 2)
        await log.append([BatchEvent("live", EventKind.ATOMIC_ABANDONED, now, "S", "live", reason="incomplete")])
        await wait_until(lambda: [b.batch_id for b in state.model.newest_first(1)] == ["live"])
        assert state.connection == "connected" and state.problem is None
    finally:
        await state.stop()


async def test_a_missing_event_log_is_a_visible_problem_not_a_crash(nc):
    state = LiveState(nc, EventLogSettings(stream="LIVE_MISSING", subject_prefix="live_missing"))
    state.start()
    try:
        await wait_until(lambda: state.problem is not None)
        assert state.problem == "no event log LIVE_MISSING yet (is the collector running?)"
    finally:
        await state.stop()


async def test_forged_and_garbage_records_in_the_log_are_counted_and_never_stop_the_live_state(nc):
    from console.domain.signing import SIGNATURE

    key = b"k" * 32
    settings = EventLogSettings(stream="LIVE_SIGNED", subject_prefix="live_signed", key=key)
    log = EventLog(nc.jetstream(), settings)
    await log.ensure()
    state = LiveState(nc, settings, backfill=timedelta(seconds=30))
    state.start()
    now = datetime.now(timezone.utc)
    try:
        forged = BatchEvent("forged", EventKind.ATOMIC_ABANDONED, now, "S", "forged", reason="timeout").to_json()
        garbage = [b"[" * 50000, b'{"event_id":"g","kind":"fast_progress","time":"2026-11-21T03:00:00Z","flow":"abc"}']
        await nc.publish("live_signed.atomic_abandoned.S", forged)  # unsigned
        await nc.publish("live_signed.atomic_abandoned.S", forged, headers={SIGNATURE: "0" * 64})
        for body in garbage:  # signed with the key, so only the parser can refuse them
            await EventLog(nc.jetstream(), settings).js.publish("live_signed.x.S", body,
                                                                headers={SIGNATURE: signature(key, body)})
        await log.append([BatchEvent("real", EventKind.ATOMIC_ABANDONED, now, "S", "real", reason="incomplete")])
        await wait_until(lambda: [b.batch_id for b in state.model.newest_first()] == ["real"])
        assert state.log.skipped == {"forged: unsigned": 1, "forged: bad signature": 1, "nested too deeply": 1,
                                     "'flow' is not an integer in 1..65535": 1}
        assert state.skipped == 4 and state.problem is None
    finally:
        await state.stop()


async def test_a_live_state_stopped_as_it_starts_following_always_stops(nc):
    """Stopped while its subscribe request is answered, nats-py's wait_for (Python 3.11) kept the
    cancel and the follower read on: stop() waited for ever (a notebook's close hung in CI)."""
    import asyncio
    import random

    settings = EventLogSettings(stream="LIVE_STOPS", subject_prefix="live_stops", key=b"k" * 32)
    await EventLog(nc.jetstream(), settings).ensure()
    delays = random.Random(7)
    hung = 0
    for _ in range(150):  # stops landing before, during and after the subscribe (9 in 200 hung before)
        state = LiveState(nc, settings)
        state.start()
        await asyncio.sleep(delays.uniform(0, 0.02))
        done, _ = await asyncio.wait([asyncio.create_task(state.stop())], timeout=5)
        hung += not done
    assert hung == 0
