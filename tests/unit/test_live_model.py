from collections import Counter
from datetime import datetime, timedelta, timezone

from console.domain.events import BatchEvent, EventKind
from console.domain.live_model import LiveModel

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=timezone.utc)


def at(seconds):
    return T0 + timedelta(seconds=seconds)


def abandoned(i, seconds, reason="timeout", stream="S"):
    return BatchEvent(f"adv.{i}", EventKind.ATOMIC_ABANDONED, at(seconds), stream, f"a{i}", reason=reason)


def test_counters_by_reason_over_windows_and_newest_first():
    model = LiveModel()
    for i, (seconds, reason) in enumerate([(0, "timeout"), (3000, "incomplete"), (3500, "timeout"), (3590, "large")]):
        model.apply(abandoned(i, seconds, reason))
    now = at(3600)
    assert model.counts_by_reason(now, timedelta(minutes=5)) == Counter({"timeout": 1, "large": 1})
    assert model.counts_by_reason(now, timedelta(hours=1)) == Counter({"timeout": 2, "incomplete": 1, "large": 1})
    assert [b.batch_id for b in model.newest_first(3)] == ["a3", "a2", "a1"]


def test_fast_outcomes_count_as_lost_batches_with_their_reason():
    model = LiveModel()
    model.apply(BatchEvent("f.x", EventKind.FAST_ENDED_EARLY, at(1), "F", "f1", reason="gap"))
    model.apply(BatchEvent("f.d", EventKind.FAST_DROPPED, at(2), None, "f2", inferred=True))
    assert [(b.kind, b.reason) for b in model.newest_first()] == [("fast", "dropped"), ("fast", "gap")]


def test_per_interval_series_by_reason():
    model = LiveModel()
    for i, seconds in enumerate([5, 65, 70, 125]):
        model.apply(abandoned(i, seconds))
    model.apply(abandoned(9, 66, "incomplete"))
    assert model.per_interval(at(180), timedelta(minutes=1), 3) == {"timeout": [1, 2, 1], "incomplete": [0, 1, 0]}


def test_active_fast_batches_follow_progress_flow_and_gaps_until_their_outcome():
    model = LiveModel()
    model.apply(BatchEvent("s", EventKind.FAST_STARTED, at(0), None, "b", gap_mode="ok", flow=500))
    model.apply(BatchEvent("fc", EventKind.FAST_FLOW_CHANGED, at(1), None, "b", gap_mode="ok", flow=250, previous_flow=500, seq=1000))
    model.apply(BatchEvent("p", EventKind.FAST_PROGRESS, at(2), None, "b", gap_mode="ok", flow=250, seq=2000, acks=8))
    model.apply(BatchEvent("g", EventKind.FAST_GAP, at(3), None, "b", gap_mode="ok", seq=2100, first_lost_seq=2097, lost=3))
    batch = model.active["b"]
    assert (batch.flow, batch.acked_seq, batch.last_seq, batch.gaps, batch.lost) == (250, 2000, 2100, 1, 3)
    assert [f for _, f in batch.flow_points] == [500, 250, 250]
    assert list(batch.gap_points) == [(at(3), 2100, 3)]
    model.apply(BatchEvent("c", EventKind.FAST_COMMITTED, at(4), "F", "b", count=2500))
    assert model.active == {}


def test_memory_is_bounded_and_redelivered_events_are_ignored():
    model = LiveModel(recent=3, max_active=2, max_streams=2)
    for i in range(10):
        model.apply(abandoned(i, i))
    assert model.lost_batches() == 3
    for i, stream in enumerate(("T", "U")):  # a third stream pushes out the one lost longest ago
        model.apply(abandoned(20 + i, 20 + i, stream=stream))
    assert {b.stream for b in model.newest_first()} == {"T", "U"}
    for name in ("x", "y", "z"):
        model.apply(BatchEvent(f"s{name}", EventKind.FAST_STARTED, at(ord(name)), None, name, flow=10))
    assert set(model.active) == {"y", "z"}
    before = model.version
    model.apply(abandoned(9, 9))  # the same event again
    assert model.version == before


def test_a_flood_on_one_stream_keeps_counts_exact_and_leaves_other_streams_on_the_page():
    model = LiveModel()
    model.apply(abandoned("real", 10, "incomplete", stream="ORDERS"))
    for i in range(600):
        model.apply(abandoned(f"forged{i}", 20 + i / 100, stream="X"))
    assert model.counts_by_reason(at(30), timedelta(minutes=5)) == Counter({"timeout": 600, "incomplete": 1})
    assert "areal" in [b.batch_id for b in model.newest_first(20)]


def test_an_unhealthy_collector_is_heard_but_not_alive():
    model = LiveModel()
    model.apply(BatchEvent("status.1", EventKind.COLLECTOR_STATUS, at(10),
                           detail='{"healthy": false, "unhealthy": ["writer stuck"]}'))
    assert model.collector_heard(at(11)) and not model.collector_alive(at(11))


def test_collector_liveness_and_freshness_come_from_status_events():
    model = LiveModel()
    assert not model.collector_alive(at(0)) and model.freshness(at(0)) is None
    model.apply(BatchEvent("status.1", EventKind.COLLECTOR_STATUS, at(10), detail='{"rejected": {"invalid reply subject": 2}}'))
    assert model.collector_alive(at(20)) and not model.collector_alive(at(40))
    assert model.collector.rejected == {"invalid reply subject": 2}
    assert model.freshness(at(12)) == timedelta(seconds=2)


def test_late_errors_of_an_ended_batch_do_not_reopen_it():
    model = LiveModel()
    model.apply(BatchEvent("s", EventKind.FAST_STARTED, at(0), None, "b", gap_mode="fail", flow=5))
    model.apply(BatchEvent("x", EventKind.FAST_ENDED_EARLY, at(1), "F", "b", reason="gap", count=20))
    model.apply(BatchEvent("e", EventKind.FAST_ERROR, at(2), "F", "b", seq=25, err_code=10208))
    model.apply(BatchEvent("e2", EventKind.FAST_ERROR, at(2), "F", "other", seq=1, err_code=10211))
    assert model.active == {}


def test_a_status_a_collector_did_not_write_sanely_is_ignored_and_an_older_one_gets_defaults():
    model = LiveModel()
    model.apply(BatchEvent("status.1", EventKind.COLLECTOR_STATUS, at(10), detail='{"rejected": {"x": "many"}}'))
    assert model.collector is None and not model.collector_heard(at(11))
    model.apply(BatchEvent("status.2", EventKind.COLLECTOR_STATUS, at(12), detail='{"events_written": 3}'))
    assert (model.collector.events_written, model.collector.healthy, model.collector.rejected) == (3, True, {})


def test_a_retracted_loss_leaves_the_lists_and_the_counts_and_warnings_are_kept_apart():
    from console.ui.live import notices_html

    model = LiveModel()
    model.apply(BatchEvent("f.d", EventKind.FAST_DROPPED, at(2), None, "slow-1", inferred=True))
    assert model.find_lost("slow-1") is not None and model.counts_by_reason(at(3), timedelta(minutes=5)) == {"dropped": 1}
    model.apply(BatchEvent("f.r", EventKind.LOSS_RETRACTED, at(3), None, "slow-1", reason="dropped"))
    assert model.find_lost("slow-1") is None and model.counts_by_reason(at(3), timedelta(minutes=5)) == {}
    model.apply(BatchEvent("w", EventKind.ATOMIC_OPEN_DROPPED, at(4), "<b>S</b>", reason="leader_change",
                           detail="the stream elected a new leader: <script>"))
    model.apply(BatchEvent("r", EventKind.FAST_REJECTED, at(5), "ING", "busy-1", err_code=10211))
    shown = notices_html(model)
    assert "&lt;script&gt;" in shown and "&lt;b&gt;S&lt;/b&gt;" in shown and "<script>" not in shown
    assert "ING" in shown and "1 reported loss(es) retracted" in shown
    assert model.lost_batches() == 0


def test_a_flood_of_forged_advisories_on_a_stream_leaves_the_system_accounts_loss_on_the_page():
    from datetime import datetime, timedelta, timezone

    from console.domain.events import ACCOUNT_ADVISORY, SYSTEM_ADVISORY, BatchEvent, EventKind
    from console.domain.live_model import LiveModel

    t0 = datetime(2026, 11, 24, 6, 0, tzinfo=timezone.utc)
    model = LiveModel(recent=50)
    model.apply(BatchEvent("real", EventKind.ATOMIC_ABANDONED, t0, "ORDERS", "real-batch", reason="timeout",
                           source=SYSTEM_ADVISORY))
    for n in range(5_000):
        model.apply(BatchEvent(f"forged-{n}", EventKind.ATOMIC_ABANDONED, t0 + timedelta(milliseconds=n + 1), "ORDERS",
                               f"forged-{n}", reason="timeout", source=ACCOUNT_ADVISORY, unverified=True))
    assert model.find_lost("real-batch") is not None
    assert "real-batch" in [b.batch_id for b in model.newest_first(limit=100)]
    assert "real-batch" in [b.batch_id for b in model.lost_on("ORDERS")]


def test_an_older_status_stored_late_never_makes_a_live_collector_look_silent():
    import json
    from datetime import datetime, timedelta, timezone

    from console.domain.events import BatchEvent, EventKind
    from console.domain.live_model import LiveModel

    now = datetime(2026, 11, 24, 6, 0, tzinfo=timezone.utc)
    status = json.dumps({"instance": "c1", "healthy": True})
    model = LiveModel()
    model.apply(BatchEvent("s-new", EventKind.COLLECTOR_STATUS, now, detail=status))
    model.apply(BatchEvent("s-old", EventKind.COLLECTOR_STATUS, now - timedelta(hours=1), detail=status))
    assert model.collector_seen == now and model.collector_state(now + timedelta(seconds=1)) != "silent"


def test_a_blind_window_is_shown_on_live_and_in_an_incident_beside_it():
    from datetime import datetime, timedelta, timezone

    from console.domain.events import BatchEvent, EventKind, capture_interrupted
    from console.domain.incident import build_incident, timeline
    from console.domain.live_model import LiveModel
    from console.ui.live import notices_html

    t0 = datetime(2026, 11, 24, 6, 0, tzinfo=timezone.utc)
    window = capture_interrupted("c1", t0, t0 + timedelta(seconds=4), "advisory stream n1 -> n2 <b>")
    model = LiveModel()
    model.apply(window)
    assert list(model.blind_windows) == [(t0, t0 + timedelta(seconds=4), "advisory stream n1 -> n2 <b>")]
    shown = notices_html(model)
    assert "capture interrupted from" in shown and "losses in this window may be missing" in shown
    assert "&lt;b&gt;" in shown and "<b>advisory" not in shown
    loss = BatchEvent("l1", EventKind.ATOMIC_ABANDONED, t0 + timedelta(seconds=30), "ORDERS", "b1", reason="timeout")
    rows = timeline(build_incident("b1", [window, loss]))
    assert any("capture interrupted" in what and "may be missing" in what for _, _, what in rows)


def test_a_key_is_wrong_only_when_statuses_fail_and_nothing_verifies():
    from console.domain.events import STATUS_UNVERIFIED, KeyTally

    forged_beside_real = KeyTally()
    forged_beside_real.take(None, STATUS_UNVERIFIED)
    forged_beside_real.take(abandoned(1, 1), None)  # an event that verifies: this key is the collector's
    assert not forged_beside_real.wrong
    rotated = KeyTally()  # a log with an older key's statuses, then this key's first event
    rotated.take(None, STATUS_UNVERIFIED)
    assert rotated.wrong
    rotated.take(abandoned(2, 2), None)
    assert not rotated.wrong
    other_garbage = KeyTally()
    other_garbage.take(None, "not JSON")
    assert not other_garbage.wrong


def test_several_systems_models_read_as_one_each_loss_with_its_system():
    from console.domain.live_across import LiveAcross

    eu, us = LiveModel(system="eu"), LiveModel(system="us")
    eu.apply(abandoned(1, 10))
    us.apply(abandoned(2, 20, "incomplete"))
    eu.apply(abandoned(3, 30))
    across = LiveAcross(lambda: {"eu": eu, "us": us})
    assert [(b.batch_id, b.system) for b in across.newest_first(10)] == [("a3", "eu"), ("a2", "us"), ("a1", "eu")]
    assert across.counts_by_reason(at(60), timedelta(minutes=5)) == Counter({"timeout": 2, "incomplete": 1})
    assert sum(sum(v) for v in across.per_interval(at(60), timedelta(minutes=1), 5).values()) == 3
    before = across.version
    us.apply(abandoned(4, 40))
    assert across.version != before


def test_a_loss_in_a_supercluster_keeps_its_cluster_and_live_shows_it():
    from console.ui.live import recent_frame

    model = LiveModel()
    model.apply(BatchEvent("adv.1", EventKind.ATOMIC_ABANDONED, at(1), "S", "a1", reason="timeout", cluster="west"))
    assert model.newest_first(1)[0].cluster == "west"
    frame = recent_frame(model)
    assert list(frame["cluster"]) == ["west"] and list(frame.columns)[-2:] == ["cluster", "investigate"]
    assert "cluster" not in recent_frame(LiveModel()).columns  # one cluster: no column


def status(seconds, detail="{}"):
    return BatchEvent(f"status.{seconds}", EventKind.COLLECTOR_STATUS, at(seconds), detail=detail)


def test_a_batch_heard_only_from_a_gap_leaves_the_active_list_once_quiet_and_a_slow_one_stays():
    """A gap of a batch the collector never saw start (a forger's, or one whose start it missed) is a loss,
    said; the batch is active while heard from, not for ever: a tracked one is said slow or dropped once
    silent past the batch timeout, so one still quiet after that is not tracked."""
    model = LiveModel()
    model.apply(status(0, '{"batch_timeout": 5}'))
    model.apply(BatchEvent("g", EventKind.FAST_GAP, at(1), None, "forged", gap_mode="ok", seq=10, first_lost_seq=1, lost=9))
    model.apply(BatchEvent("p", EventKind.FAST_PROGRESS, at(1), None, "slow", gap_mode="ok", flow=10, seq=10, acks=1))
    model.apply(BatchEvent("sl", EventKind.FAST_SLOW, at(7), None, "slow", gap_mode="ok", flow=10, seq=10))
    model.apply(BatchEvent("p2", EventKind.FAST_PROGRESS, at(14), None, "live", gap_mode="ok", flow=10, seq=10, acks=1))
    model.apply(status(15, '{"batch_timeout": 5}'))
    assert set(model.active) == {"forged", "slow", "live"}  # 14 s quiet: the timeout (5) and the grace (10) not yet
    model.apply(status(17, '{"batch_timeout": 5}'))
    assert set(model.active) == {"slow", "live"} and model.quiet_retired == 1
    model.apply(status(30, '{"batch_timeout": 5}'))
    assert set(model.active) == {"slow"}  # the slow one: until the collector forgets it unsaid (600 s)
    model.apply(status(30 + 600, '{"batch_timeout": 5}'))
    assert model.active == {} and model.quiet_retired == 3
    model.apply(BatchEvent("g2", EventKind.FAST_GAP, at(700), None, "forged", gap_mode="ok", seq=20, first_lost_seq=11, lost=9))
    assert set(model.active) == {"forged"}  # quiet is not ended: heard from again, active again


def test_a_status_with_any_batch_timeout_retires_by_a_sane_one():
    model = LiveModel()
    model.apply(BatchEvent("g", EventKind.FAST_GAP, at(0), None, "b", gap_mode="ok", seq=10, first_lost_seq=1, lost=9))
    for i, timeout in enumerate(["1e308", "0", "1e-300", "1" + "0" * 400, "Infinity", "NaN"]):
        model.apply(status(10 + i, '{"batch_timeout": %s}' % timeout))
        assert "b" in model.active, timeout  # 10 s and the grace: not quiet yet, whatever the status says
    model.apply(status(21))
    assert model.active == {}


def test_a_reader_limited_to_some_streams_counts_and_lists_theirs_alone():
    """console.queries: Live through a team's sight. Its counts and bars are its streams' (another team's
    flood is not in them), a loss named later joins its stream's count, a retraction leaves it."""
    from console.domain.roles import Grants, Role
    from console.queries.live import SeenLive
    from console.queries.sight import Sight

    sight = Sight(Grants((Role("team", frozenset({"search.run"}), streams=("TEAM*",)),)))
    model = LiveModel()
    for i in range(5):
        model.apply(abandoned(i, i, "timeout", stream="OTHER"))
    model.apply(abandoned(10, 10, "large", stream="TEAM_A"))
    model.apply(BatchEvent("f.d", EventKind.FAST_DROPPED, at(11), None, "f-later", inferred=True))
    team = SeenLive(model, sight.limit)
    assert [b.batch_id for b in team.newest_first()] == ["f-later", "a10"]  # a loss no stream is named for: everyone's
    model.apply(BatchEvent("f.a", EventKind.FAST_ATTRIBUTED, at(12), "OTHER", "f-later"))  # it was OTHER's
    now = at(60)
    assert [b.batch_id for b in team.newest_first()] == ["a10"]
    assert team.counts_by_reason(now, timedelta(hours=1)) == Counter({"large": 1})
    assert team.per_interval(now, timedelta(minutes=1), 1) == {"large": [1]}
    assert model.counts_by_reason(now, timedelta(hours=1)) == Counter({"timeout": 5, "large": 1, "dropped": 1})
    assert team.find_lost("a0") is None and team.find_lost("a10") is not None and team.lost_on("OTHER") == []
    assert Sight(Grants((Role("all", frozenset()),))).limit is None  # every stream: nothing to filter
