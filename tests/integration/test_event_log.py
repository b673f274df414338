import asyncio
from datetime import datetime, timedelta, timezone

from nats.js.api import DiscardPolicy, StreamConfig

from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.events import BatchEvent, EventKind

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=timezone.utc)


def event(i: int, kind=EventKind.FAST_GAP, stream="S") -> BatchEvent:
    return BatchEvent(f"test.{i}", kind, T0 + timedelta(seconds=i), stream, f"b{i}", seq=i)


async def test_append_dedups_on_event_id_and_reads_back_in_order(nc):
    log = EventLog(nc.jetstream(), EventLogSettings(stream="LOG_A", subject_prefix="log_a"))
    await log.ensure()
    first = await log.append([event(1), event(2), event(3)])
    assert (first.stored, first.duplicates, first.refused, first.retry) == (3, 0, [], [])
    again = await log.append([event(2), event(4)])
    assert (again.stored, again.duplicates) == (1, 1)  # a redelivered input makes no second event
    assert [(seq, e.event_id) for seq, e in await log.read(1)] == [(1, "test.1"), (2, "test.2"), (3, "test.3"), (4, "test.4")]
    assert [e.event_id for _, e in await log.read(2, 3)] == ["test.2", "test.3"]


async def test_read_filters_by_kind_and_stream(nc):
    log = EventLog(nc.jetstream(), EventLogSettings(stream="LOG_B", subject_prefix="log_b"))
    await log.ensure()
    await log.append([event(1), event(2, EventKind.ATOMIC_ABANDONED), event(3, stream="T"), event(4, EventKind.ATOMIC_ABANDONED, "T")])
    assert [e.event_id for _, e in await log.read(1, kind_filter="atomic_abandoned.*", idle_timeout=0.5)] == ["test.2", "test.4"]
    assert [e.event_id for _, e in await log.read(1, kind_filter="*.T", idle_timeout=0.5)] == ["test.3", "test.4"]


async def test_follow_backfills_from_a_time_then_goes_live(nc):
    log = EventLog(nc.jetstream(), EventLogSettings(stream="LOG_C", subject_prefix="log_c"))
    await log.ensure()
    await log.append([event(1)])
    since = datetime.now(timezone.utc)
    await asyncio.sleep(0.01)  # the stored time of the next event must be after `since`
    await log.append([event(2)])
    seen = []

    async def follow():
        async for _, e in log.follow(since):
            seen.append(e.event_id)  # all of them are events: nothing here is skipped
            if len(seen) == 2:
                return

    follower = asyncio.create_task(follow())
    while not seen:
        await asyncio.sleep(0.01)
    await log.append([event(3)])  # live, after the backfill
    await asyncio.wait_for(follower, 5)
    assert seen == ["test.2", "test.3"]


async def test_an_event_the_log_can_never_take_is_refused_and_the_rest_are_stored(nc):
    log = EventLog(nc.jetstream(), EventLogSettings(stream="LOG_D", subject_prefix="log_d"))
    await log.ensure()
    no_flow = BatchEvent("test.4", EventKind.FAST_PROGRESS, T0, "S", "b4", flow=0)  # readers refuse a flow of 0
    result = await log.append([event(1), event(2, stream="a b"), event(3), no_flow])
    assert result.stored == 2 and result.retry == []
    [(refused, why), (unreadable, because)] = result.refused
    assert refused.event_id == "test.2" and "white space" in why
    assert unreadable.event_id == "test.4" and because.startswith("readers would refuse it: 'flow'")
    assert [e.event_id for _, e in await log.read(1)] == ["test.1", "test.3"]


async def test_an_operators_limits_on_an_existing_log_are_kept(nc):
    js = nc.jetstream()
    await js.add_stream(StreamConfig(
        name="LOG_E", subjects=["log_e.>"], max_msgs=5000, max_bytes=10_000_000, max_age=3600,
        discard=DiscardPolicy.NEW, description="ours", duplicate_window=60,
    ))
    notes = await EventLog(js, EventLogSettings(stream="LOG_E", subject_prefix="log_e")).ensure()
    config = (await js.stream_info("LOG_E")).config
    assert (config.max_msgs, config.max_bytes, config.max_age, config.discard, config.description) == (
        5000, 10_000_000, 3600, DiscardPolicy.NEW, "ours",
    )
    assert config.duplicate_window == EventLogSettings().duplicate_window  # what the console needs
    assert any("duplicate window" in n for n in notes) and any("max_msgs of 5000" in n for n in notes)


async def test_a_window_whose_first_delivery_is_late_is_read_whole_not_empty(nc):
    """A loaded server delivers a window's first record after the idle wait: the read asks what is pending
    before it calls the window empty (a drain's ledger once read no loss beside it on a busy cluster)."""
    log = EventLog(nc.jetstream(), EventLogSettings(stream="LOG_LATE", subject_prefix="log_late"))
    await log.ensure()
    start = datetime.now(timezone.utc)
    await log.append([event(1), event(2)])
    end = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert [e.event_id for _, e in await log.window(start, end, idle_timeout=1e-6)] == ["test.1", "test.2"]
    assert await log.window(end, end + timedelta(seconds=1), idle_timeout=1e-6) == []  # empty: said at once
