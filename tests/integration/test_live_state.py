from datetime import datetime, timedelta, timezone

from console.broker.eventlog import EventLog, EventLogSettings
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
        await wait_until(lambda: len(state.model.recent) == 2)
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
