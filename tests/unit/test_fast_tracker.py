from datetime import datetime, timedelta, timezone

import pytest

from console.domain.events import LOST_KINDS, BatchEvent, EventKind, event_from_json
from console.domain.fast_ingest import InvalidReplySubject
from console.domain.fast_tracker import FastBatchTracker
from console.domain.replies import MalformedReply

T0 = datetime(2026, 11, 21, 3, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def replay(tracker, records):
    """Feed captured replies to the tracker as the tap received them, on the subjects they came on."""
    events = []
    for i, record in enumerate(records):
        events += tracker.observe(record["subject"], record["body"].encode(), at(i * 0.01))
    return events


def kinds(events):
    return [e.kind for e in events]


def test_a_tapped_batch_from_start_to_commit(vectors):
    tracker = FastBatchTracker()
    events = replay(tracker, vectors.scenario("fast", "tapped_eob"))
    assert kinds(events) == [EventKind.FAST_STARTED, EventKind.FAST_PROGRESS, EventKind.FAST_COMMITTED]
    started, progress, committed = events
    assert (started.flow, started.gap_mode, started.stream, started.inferred) == (5, "fail", None, False)
    assert (progress.acks, progress.seq, progress.stream) == (5, 20, "TAPPED")
    assert (committed.stream, committed.count, committed.stream_seq, committed.eob) == ("TAPPED", 20, 20, True)  # op 3
    assert tracker.batches == {}


def test_gap_in_ok_mode_then_eob_commit(vectors):
    events = replay(FastBatchTracker(), vectors.scenario("fast", "gap_ok"))
    gap = next(e for e in events if e.kind is EventKind.FAST_GAP)
    assert (gap.first_lost_seq, gap.seq, gap.lost, gap.gap_mode) == (4, 5, 1, "ok")
    committed = events[-1]
    assert (committed.kind, committed.eob, committed.count, committed.stream) == (EventKind.FAST_COMMITTED, True, 6, "FAST")


def test_gap_in_fail_mode_ends_the_batch_early(vectors):
    records = vectors.scenario("fast", "gap_fail")
    at_gap = [r for r in records if r["subject"].endswith(".5.1.$FI")]
    events = replay(FastBatchTracker(), at_gap)
    assert kinds(events) == [EventKind.FAST_GAP, EventKind.FAST_ENDED_EARLY]
    assert (events[1].reason, events[1].count, events[1].stream) == ("gap", 3, "FAST")


@pytest.mark.parametrize("op, seq, count, kind", [
    (2, 5, 3, EventKind.FAST_ENDED_EARLY),  # the commit, seq 5, itself past a gap: 3 stored before it
    (3, 5, 3, EventKind.FAST_ENDED_EARLY),  # an EOB at 5 counts 4 when whole
    (2, 5, 5, EventKind.FAST_COMMITTED),
    (3, 5, 4, EventKind.FAST_COMMITTED),
])
def test_a_puback_on_a_commits_reply_counting_short_in_fail_mode_is_the_batchs_end(vectors, op, seq, count, kind):
    """The server answers a commit that made a gap with the gap and the PubAck of what it stored before it:
    on the commit's own reply subject, it is still no commit (bench/maintain.py found them taken for one)."""
    [start] = [r for r in vectors.scenario("fast", "gap_fail") if r["subject"].endswith(".1.0.$FI")]
    head = start["subject"][:-len(".1.0.$FI")]
    tracker = FastBatchTracker()
    tracker.observe(start["subject"], start["body"].encode(), at(0))
    events = tracker.observe(f"{head}.{seq}.{op}.$FI",
                             f'{{"stream":"FAST","seq":{count},"batch":"x","count":{count}}}'.encode(), at(1))
    assert kinds(events)[-1] is kind and events[-1].count == count


def test_flow_changes_the_server_made_are_events(vectors):
    events = replay(FastBatchTracker(), vectors.scenario("fast", "concurrent_second"))
    changes = [(e.previous_flow, e.flow) for e in events if e.kind is EventKind.FAST_FLOW_CHANGED]
    assert changes == [(1, 2), (2, 4), (4, 8), (8, 16), (16, 32), (32, 64)]
    started = events[0]
    assert (started.kind, started.flow, started.previous_flow) == (EventKind.FAST_STARTED, 1, 500)


def test_acks_are_folded_into_one_progress_event_per_interval():
    tracker = FastBatchTracker(progress_interval=1.0)
    tracker.observe("_INBOX.p.b.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(0))
    for n in range(1, 50):
        tracker.observe(f"_INBOX.p.b.10.ok.{n * 10}.1.$FI", f'{{"type":"ack","seq":{n * 10},"msgs":10}}'.encode(), at(n * 0.01))
    assert tracker.tick(at(0.5)) == []
    [progress] = tracker.tick(at(1.0))
    assert (progress.acks, progress.seq) == (50, 490)


def ack(tracker, batch: str, seq: int, when: float, flow: int = 10):
    return tracker.observe(f"_INBOX.p.{batch}.{flow}.ok.{max(seq, 1)}.{0 if seq <= 1 else 1}.$FI",
                           f'{{"type":"ack","seq":{seq},"msgs":{flow}}}'.encode(), at(when))


def test_a_batch_silent_past_the_timeout_when_its_rate_said_an_ack_was_due_is_inferred_dropped():
    tracker = FastBatchTracker(batch_timeout=10)
    for seq, when in ((0, 0), (10, 0.1), (20, 0.2)):  # 100 messages a second: an ack every 0.1 s
        ack(tracker, "idle", seq, when)
    assert [e.kind for e in tracker.tick(at(9))] == [EventKind.FAST_PROGRESS]
    [dropped] = tracker.tick(at(10.5))
    assert (dropped.kind, dropped.batch_id, dropped.inferred) == (EventKind.FAST_DROPPED, "idle", True)
    assert tracker.batches == {}


def test_a_batch_open_while_the_collector_was_deaf_is_not_dropped_by_its_silence():
    """The collector's connection down from 1 s to 3 s (its node restarted): the batch's commit may have
    gone by then, unheard. Its silence after is no drop: it is said as not known, and counts no loss."""
    tracker = FastBatchTracker(batch_timeout=10)
    for seq, when in ((0, 0), (10, 0.1), (20, 0.2)):
        ack(tracker, "deaf", seq, when)
        ack(tracker, "heard", seq, when)
    tracker.not_heard(at(1), at(3))
    ack(tracker, "heard", 30, 3.5)  # heard again after: its silence judged as ever
    assert [e.kind for e in said(tracker.tick(at(12.5)))] == []  # 10 s from the reconnect: not yet
    unheard, dropped = said(tracker.tick(at(13.6)))
    assert (unheard.kind, unheard.batch_id) == (EventKind.FAST_SLOW, "deaf") and "cannot tell" in unheard.detail
    assert unheard.kind not in LOST_KINDS and (dropped.kind, dropped.batch_id) == (EventKind.FAST_DROPPED, "heard")
    assert tracker.batches == {}


def test_acks_faster_than_the_clock_tells_are_a_rate_and_silence_after_them_a_drop():
    """Two acks read at one instant (a coarse clock, or both in one read of the socket): not a rate unknown."""
    tracker = FastBatchTracker(batch_timeout=10)
    ack(tracker, "burst", 0, 0, flow=5)
    ack(tracker, "burst", 5, 0, flow=5)
    assert tracker.batches["burst"].ack_interval() == 0
    assert [e.kind for e in said(tracker.tick(at(10.5)))] == [EventKind.FAST_DROPPED]


def test_a_slow_producer_is_slow_not_dropped_and_goes_on_without_any_loss():
    """flow 100, a message every 0.5 s: an ack every 50 s, and the server never drops it."""
    tracker = FastBatchTracker(batch_timeout=10)
    ack(tracker, "slow", 0, 0, flow=100)
    [slow] = said(tracker.tick(at(10.5)))
    assert (slow.kind, slow.batch_id) == (EventKind.FAST_SLOW, "slow") and "cannot tell" in slow.detail
    assert tracker.tick(at(30)) == []  # said once
    assert [e.kind for e in ack(tracker, "slow", 100, 50, flow=100)] == []
    [committed] = said(tracker.observe("_INBOX.p.slow.100.ok.150.3.$FI",
                                       b'{"stream":"S","seq":150,"batch":"slow","count":150}', at(75)))
    assert committed.kind is EventKind.FAST_COMMITTED
    # with two acks its rate is known: an ack every 50 s, so a silence of 60 s is not yet a drop
    ack(tracker, "slow2", 0, 0, flow=100)
    ack(tracker, "slow2", 100, 50, flow=100)
    assert EventKind.FAST_DROPPED not in [e.kind for e in tracker.tick(at(110))]
    assert EventKind.FAST_DROPPED in [e.kind for e in tracker.tick(at(151))]


def test_a_reply_for_a_batch_reported_dropped_retracts_the_loss():
    tracker = FastBatchTracker(batch_timeout=1)
    for seq, when in ((0, 0), (10, 0.1), (20, 0.2)):
        ack(tracker, "back", seq, when)
    assert EventKind.FAST_DROPPED in [e.kind for e in tracker.tick(at(2))]
    kinds = [e.kind for e in ack(tracker, "back", 30, 3)]
    assert kinds[0] is EventKind.LOSS_RETRACTED
    # a 10208 for a batch reported dropped confirms the drop: nothing more is said
    for seq, when in ((0, 20), (10, 20.1), (20, 20.2)):
        ack(tracker, "gone", seq, when)
    assert EventKind.FAST_DROPPED in [e.kind for e in tracker.tick(at(22))]
    assert tracker.observe("_INBOX.p.gone.10.ok.41.1.$FI", UNKNOWN, at(23)) == []


def said(events):
    """What the tracker said besides folding acks into progress."""
    return [e for e in events if e.kind is not EventKind.FAST_PROGRESS]


UNKNOWN = b'{"error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"},"stream":"CL","seq":0}'


@pytest.mark.parametrize("elected, reason", [(2.5, "leader_change"), (None, "unknown_batch")])
def test_a_batch_unknown_to_the_leader_is_lost_once_with_its_refusals_counted(elected, reason):
    tracker = FastBatchTracker(batch_timeout=10)
    for seq, when in ((0, 0), (10, 1), (20, 2)):
        ack(tracker, "gone", seq, when)
    if elected is not None:
        tracker.leader_elected("CL", at(elected))
    [lost] = said(tracker.observe("_INBOX.p.gone.10.fail.21.1.$FI", UNKNOWN, at(3)))  # at once, as a subscriber knows
    assert (lost.kind, lost.stream, lost.reason, lost.seq) == (EventKind.FAST_LOST, "CL", reason, 20)
    for seq in range(22, 31):  # every later message, then the commit: no event each
        op = "2" if seq == 30 else "1"
        assert tracker.observe(f"_INBOX.p.gone.10.fail.{seq}.{op}.$FI", UNKNOWN, at(3 + seq / 100)) == []
    [refused] = tracker.tick(at(3.5))
    assert (refused.kind, refused.lost, refused.seq, refused.err_code) == (EventKind.FAST_ERROR, 10, 21, 10208)
    assert tracker.tick(at(10)) == [] and tracker.batches == {}
    assert event_from_json(lost.to_json()) == lost


def test_10208_after_a_fail_mode_end_and_10211_are_said_once_per_batch():
    tracker = FastBatchTracker()
    ack(tracker, "ended", 0, 0)
    [ended] = said(tracker.observe("_INBOX.p.ended.10.fail.5.1.$FI", b'{"stream":"S","seq":4,"batch":"ended","count":4}',
                                   at(1)))
    assert ended.kind is EventKind.FAST_ENDED_EARLY
    assert tracker.observe("_INBOX.p.ended.10.fail.6.1.$FI", UNKNOWN, at(1.1)) == []
    assert tracker.tick(at(5)) == [] and tracker.refused_after_end == 1
    busy = b'{"error":{"code":429,"err_code":10211,"description":"batch publish too many inflight"},"stream":"S","seq":0}'
    [rejected] = tracker.observe("_INBOX.p.busy.10.ok.1.0.$FI", busy, at(2))
    assert (rejected.kind, rejected.stream, rejected.err_code) == (EventKind.FAST_REJECTED, "S", 10211)
    assert tracker.observe("_INBOX.p.busy.10.ok.2.1.$FI", busy, at(2.1)) == []


def test_past_the_cap_batches_are_counted_and_outcomes_still_reported():
    tracker = FastBatchTracker(max_batches=1)
    tracker.observe("_INBOX.p.one.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(0))
    [started] = tracker.observe("_INBOX.p.two.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(0))
    assert (started.kind, started.batch_id, started.detail) == (EventKind.FAST_STARTED, "two", "not tracked: tracker full")
    assert tracker.untracked == 1 and set(tracker.batches) == {"one"}
    [committed] = tracker.observe("_INBOX.p.two.10.ok.3.3.$FI", b'{"stream":"S","seq":9,"batch":"two","count":2}', at(1))
    assert (committed.kind, committed.count) == (EventKind.FAST_COMMITTED, 2)


def test_bad_input_raises_for_the_caller_to_count():
    tracker = FastBatchTracker()
    with pytest.raises(InvalidReplySubject):
        tracker.observe("_INBOX.not.a.reply", b'{"type":"ack","seq":0,"msgs":10}', at(0))
    with pytest.raises(MalformedReply):
        tracker.observe("_INBOX.p.b.10.ok.1.0.$FI", b"garbage", at(0))
    with pytest.raises(MalformedReply):
        tracker.observe("_INBOX.p.b.10.ok.1.0.$FI", b"", at(0))


def test_a_body_that_is_no_reply_is_refused_as_such_whatever_its_subject_and_remembered():
    tracker = FastBatchTracker()
    body = b'{"type":"ack","seq":"not a number","msgs":10}'
    assert tracker.refused_before(body) is None
    with pytest.raises(MalformedReply) as refused:  # no server sends it: forged, not evidence of a bad subject
        tracker.observe("_INBOX.not.a.reply", body, at(0))
    assert tracker.refused_before(body) == refused.value.reason == "'seq' is not an integer in 0..9223372036854775807"
    assert tracker.refused_before(b'{"type":"ack","seq":1,"msgs":10}') is None
    long = b'{"type":"nope","pad":"' + b"x" * 600 + b'"}'
    with pytest.raises(MalformedReply):
        tracker.observe("_INBOX.p.b.10.ok.1.0.$FI", long, at(0))
    assert tracker.refused_before(long) is None  # only short bodies are remembered: at most 512 KiB in all
    for i in range(3000):
        with pytest.raises(MalformedReply):
            tracker.observe("_INBOX.p.b.10.ok.1.0.$FI", b"bad %d" % i, at(0))
    assert len(tracker._refused_bodies) <= 1024


def test_a_flood_of_new_batch_ids_past_the_cap_is_counted_and_said_ten_times_a_second():
    tracker = FastBatchTracker(max_batches=4)  # a quarter of them under one prefix: one batch
    said = []
    for i in range(1000):  # a forger's acks for batches nobody published, one prefix, within one second
        said += tracker.observe(f"_INBOX.forger.b{i}.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(i / 2000))
    assert set(tracker.batches) == {"b0"} and tracker.untracked == 999
    assert [e.detail for e in said] == [None] + ["not tracked: tracker full"] * 10
    more = tracker.observe("_INBOX.forger.late.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(1.5))
    assert [e.detail for e in more] == ["not tracked: tracker full"]  # a new second
    with pytest.raises(InvalidReplySubject):  # past its share, a subject the server refuses is still refused
        tracker.observe("_INBOX.forger.b9.10.ok.1.9.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(1.7))
    assert tracker.untracked == 1000
    [gap] = tracker.observe("_INBOX.forger.b500.10.ok.5.1.$FI", b'{"type":"gap","last_seq":3,"seq":5}', at(1.6))
    assert (gap.kind, gap.lost) == (EventKind.FAST_GAP, 2)  # a loss needs no state: always said


def test_events_round_trip_through_json():
    event = BatchEvent("fi.b.gap.5", EventKind.FAST_GAP, at(1.5), "S", "b", gap_mode="ok", seq=5, first_lost_seq=4, lost=1)
    assert event_from_json(event.to_json()) == event
    assert event.subject("batch_console.events") == "batch_console.events.fast_gap.S"
    assert BatchEvent("x", EventKind.FAST_STARTED, at(0)).subject("p") == "p.fast_started._unknown"


def test_a_flood_under_one_prefix_takes_only_its_share_and_a_real_batch_is_tracked_whole(vectors):
    tracker = FastBatchTracker(max_batches=8)
    for i in range(1000):
        tracker.observe(f"_INBOX.forger.f{i}.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(0))
    assert len(tracker.batches) == 2 and tracker.refused == {"_INBOX.forger": 998}
    real = replay(tracker, vectors.scenario("fast", "gap_ok"))
    assert [e.kind for e in real if e.kind is not EventKind.FAST_PROGRESS] == [
        EventKind.FAST_STARTED, EventKind.FAST_GAP, EventKind.FAST_ATTRIBUTED, EventKind.FAST_COMMITTED]
    assert real[0].detail is None  # tracked, not refused
    attributed = next(e for e in real if e.kind is EventKind.FAST_ATTRIBUTED)
    gap = next(e for e in real if e.kind is EventKind.FAST_GAP)
    assert gap.stream is None and attributed.stream is not None  # the gap went out under no stream


def test_a_forgers_flood_of_losses_of_batches_never_tracked_is_said_100_times_a_second_and_counted():
    tracker = FastBatchTracker()
    gap = b'{"type":"gap","last_seq":1,"seq":5}'
    said = []
    for i in range(5000):  # forged gaps under one prefix, within one second: each would be a loss in the log
        said += tracker.observe(f"_INBOX.forger.g{i}.10.ok.5.1.$FI", gap, at(i / 10_000))
    assert len(said) == 100 and all(e.kind is EventKind.FAST_GAP for e in said)
    assert tracker.unsaid == {"_INBOX.forger": 4900}
    [other] = tracker.observe("_INBOX.someone.x.10.ok.5.1.$FI", gap, at(0.6))  # another prefix has its own share
    assert other.kind is EventKind.FAST_GAP
    assert len(tracker.observe("_INBOX.forger.late.10.ok.5.1.$FI", gap, at(1.2))) == 1  # a new second
    # a batch tracked from its first ack: nothing of it is held back, whatever the flood
    tracker.observe("_INBOX.forger.real.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}', at(1.3))
    for i in range(200):
        tracker.observe(f"_INBOX.forger.f{i}.10.ok.5.1.$FI", gap, at(1.4))
    [real] = tracker.observe("_INBOX.forger.real.10.ok.12.1.$FI", b'{"type":"gap","last_seq":11,"seq":12}', at(1.5))
    assert (real.kind, real.batch_id, real.lost) == (EventKind.FAST_GAP, "real", 1)
    with pytest.raises(InvalidReplySubject):  # a subject the server refuses is refused, not counted here
        tracker.observe("_INBOX.forger.bad.10.ok.5.9.$FI", gap, at(1.6))
    unknown = b'{"error":{"code":404,"err_code":10208,"description":"batch unknown"},"stream":"S","seq":0}'
    for i in range(300):  # forged 10208s: no state past the share either
        tracker.observe(f"_INBOX.refuser.u{i}.10.ok.5.1.$FI", unknown, at(2.1))
    assert len(tracker.lost) == 100 and tracker.unsaid["_INBOX.refuser"] == 200
