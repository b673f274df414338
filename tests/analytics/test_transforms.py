"""Each transform on one written-out history; every expected value is written out, not computed."""

from datetime import datetime

import pytest

from console.analytics.schema import EVENT_SCHEMA
from console.analytics.transforms import (
    abandoned_batches,
    abandonment_hourly,
    fast_batch_summary,
    gap_hourly,
)


def at(hh, mm, ss=0):
    return datetime(2026, 11, 21, hh, mm, ss)


ROWS = [
    # seq, event_id, kind, time, stream, batch_id, and the fields that matter for the row
    dict(seq=1, event_id="e1", kind="atomic_abandoned", time=at(3, 10), stream="ORD", batch_id="a1", reason="timeout"),
    dict(seq=2, event_id="e2", kind="atomic_abandoned", time=at(3, 20), stream="ORD", batch_id="a2", reason="incomplete"),
    dict(seq=3, event_id="e3", kind="atomic_abandoned", time=at(4, 5), stream="PAY", batch_id="a3", reason="timeout",
         source="account_advisory", unverified=True, domain="leaf1"),  # the system account never sent it; a leaf's
    dict(seq=4, event_id="e4", kind="context", time=at(3, 12), stream="ORD", reason="n2", detail="stream_leader_elected"),
    dict(seq=5, event_id="e5", kind="context", time=at(3, 18), stream="ORD", reason="modify", detail="stream_action"),
    # f1: ok mode, two gaps and an error, then committed; its stream is only in the PubAck
    dict(seq=6, event_id="f1s", kind="fast_started", time=at(3, 30), batch_id="f1", gap_mode="ok", flow=100),
    dict(seq=7, event_id="f1f", kind="fast_flow_changed", time=at(3, 30, 1), batch_id="f1", gap_mode="ok", flow=50, previous_flow=100),
    dict(seq=8, event_id="f1g1", kind="fast_gap", time=at(3, 31), batch_id="f1", gap_mode="ok", lost=3),
    dict(seq=9, event_id="f1e", kind="fast_error", time=at(3, 31, 30), batch_id="f1", gap_mode="ok", err_code=10071),
    dict(seq=10, event_id="f1g2", kind="fast_gap", time=at(3, 32), batch_id="f1", gap_mode="ok", lost=2),
    dict(seq=11, event_id="f1c", kind="fast_committed", time=at(3, 33), stream="FAST", batch_id="f1", gap_mode="ok", count=100, eob=False),
    # f2: fail mode, ended by its gap with 40 stored
    dict(seq=12, event_id="f2s", kind="fast_started", time=at(3, 40), batch_id="f2", gap_mode="fail", flow=10),
    dict(seq=13, event_id="f2g", kind="fast_gap", time=at(3, 41), batch_id="f2", gap_mode="fail", lost=1),
    dict(seq=14, event_id="f2x", kind="fast_ended_early", time=at(3, 41), stream="FAST", batch_id="f2", gap_mode="fail", reason="gap", count=40),
    # f3: silent, inferred dropped, stream never learned
    dict(seq=15, event_id="f3s", kind="fast_started", time=at(3, 50), batch_id="f3", gap_mode="ok", flow=10),
    dict(seq=16, event_id="f3d", kind="fast_dropped", time=at(4, 1), batch_id="f3", gap_mode="ok", flow=10, inferred=True),
    # f4: a slow producer inferred dropped, then a reply retracted the loss, then it committed
    dict(seq=17, event_id="f4s", kind="fast_started", time=at(5, 0), batch_id="f4", gap_mode="ok", flow=100),
    dict(seq=18, event_id="f4d", kind="fast_dropped", time=at(5, 11), batch_id="f4", gap_mode="ok", flow=100, inferred=True),
    dict(seq=19, event_id="f4r", kind="loss_retracted", time=at(5, 12), batch_id="f4", gap_mode="ok", reason="dropped"),
    dict(seq=20, event_id="f4c", kind="fast_committed", time=at(5, 13), stream="FAST", batch_id="f4", gap_mode="ok", count=7),
    # f5: unknown to the stream's new leader (10208 after an election)
    dict(seq=21, event_id="f5s", kind="fast_started", time=at(5, 20), batch_id="f5", gap_mode="fail", flow=10),
    dict(seq=22, event_id="f5l", kind="fast_lost", time=at(5, 21), stream="CL", batch_id="f5", gap_mode="fail",
         reason="leader_change", batch_seq=20, lost=9, err_code=10208),
]


@pytest.fixture(scope="module")
def events(spark):
    names = EVENT_SCHEMA.fieldNames()
    defaults = {"inferred": False, "v": 1}
    return spark.createDataFrame([tuple({**defaults, **row}.get(n) for n in names) for row in ROWS], EVENT_SCHEMA)


def rows(df, *columns):
    return sorted(tuple(r[c] for c in columns) for r in df.collect())


def test_abandonment_hourly(events):
    assert rows(abandonment_hourly(events), "hour", "stream", "kind", "reason", "batches") == sorted([
        (at(3, 0), "ORD", "atomic", "timeout", 1),
        (at(3, 0), "ORD", "atomic", "incomplete", 1),
        (at(4, 0), "PAY", "atomic", "timeout", 1),
        (at(3, 0), "FAST", "fast", "gap", 1),
        (at(4, 0), "(unknown)", "fast", "dropped", 1),
        (at(5, 0), "CL", "fast", "leader_change", 1),  # and no row for f4: its loss was retracted
    ])


def test_gap_hourly_takes_the_stream_from_the_batchs_puback(events):
    assert rows(gap_hourly(events), "hour", "stream", "gap_mode", "gaps", "lost") == sorted([
        (at(3, 0), "FAST", "ok", 2, 5),
        (at(3, 0), "FAST", "fail", 1, 1),
    ])


def test_fast_batch_summary_one_row_per_batch(events):
    columns = ("batch_id", "stream", "started", "ended", "outcome", "gap_mode", "messages", "gaps", "lost", "errors", "min_flow", "max_flow")
    assert rows(fast_batch_summary(events), *columns) == [
        ("f1", "FAST", at(3, 30), at(3, 33), "committed", "ok", 95, 2, 5, 1, 50, 100),
        ("f2", "FAST", at(3, 40), at(3, 41), "ended_early", "fail", 40, 1, 1, 0, 10, 10),
        ("f3", "(unknown)", at(3, 50), at(4, 1), "dropped", "ok", None, 0, 0, 0, 10, 10),
        ("f4", "FAST", at(5, 0), at(5, 13), "committed", "ok", 7, 0, 0, 0, 100, 100),
        ("f5", "CL", at(5, 20), at(5, 21), "lost", "fail", None, 0, 0, 0, 10, 10),
    ]


def test_a_batch_split_across_runs_gives_the_same_row(spark, events):
    """The job recomputes a touched batch from all its events: the union must equal one clean read."""
    first_run = events.filter("seq <= 8")
    second_run = events.filter("seq > 8")
    assert rows(fast_batch_summary(first_run.unionByName(second_run)), "batch_id", "messages", "lost") == [
        ("f1", 95, 5), ("f2", 40, 1), ("f3", None, 0), ("f4", 7, 0), ("f5", None, 0),
    ]
    [open_row] = fast_batch_summary(first_run).filter("batch_id = 'f1'").collect()
    assert (open_row.outcome, open_row.stream, open_row.ended) == ("open", "(unknown)", None)


def test_abandoned_batches_count_the_context_around_each(events):
    columns = ("batch_id", "kind", "reason", "stream", "unverified", "leader_elections", "stream_updates",
               "other_abandonments", "gaps_nearby", "domain")
    assert rows(abandoned_batches(events, window_minutes=5), *columns) == sorted([
        ("a1", "atomic", "timeout", "ORD", False, 1, 0, 0, 0, None),
        ("a2", "atomic", "incomplete", "ORD", False, 0, 1, 0, 0, None),
        ("a3", "atomic", "timeout", "PAY", True, 0, 0, 0, 0, "leaf1"),
        ("f2", "fast", "gap", "FAST", False, 0, 0, 0, 1, None),
        ("f3", "fast", "dropped", "(unknown)", False, 0, 0, 0, 0, None),
        ("f5", "fast", "leader_change", "CL", False, 0, 0, 0, 0, None),
    ])
    wide = abandoned_batches(events, window_minutes=15).filter("batch_id = 'a1'").collect()[0]
    assert (wide.leader_elections, wide.stream_updates, wide.other_abandonments) == (1, 1, 1)


def test_mean_time_between_abandonments_per_stream(events):
    from console.analytics.job import stream_stats

    times: dict = {}
    for row in abandoned_batches(events).collect():
        times.setdefault(row.stream, []).append(row.time)
    assert [(r["stream"], r["abandonments"], r["mean_seconds"]) for r in stream_stats(times)] == sorted([
        ("ORD", 2, 600.0), ("PAY", 1, None), ("FAST", 1, None), ("(unknown)", 1, None), ("CL", 1, None),
    ])


def test_a_retracted_loss_is_named_for_removal(events):
    from console.analytics.transforms import retracted_losses

    assert [r.event_id for r in retracted_losses(events).collect()] == ["f4d"]


def test_an_atomic_loss_whose_commit_was_answered_after_all_is_retracted_too(spark, events):
    """A loaded collector said an election's suspect lost before it read the commit's PubAck."""
    names = EVENT_SCHEMA.fieldNames()
    late = [dict(seq=90, event_id="a9l", kind="atomic_lost", time=at(6, 0), stream="ORD", batch_id="a9",
                 reason="leader_change", inferred=True, v=1),
            dict(seq=91, event_id="a9r", kind="loss_retracted", time=at(6, 1), stream="ORD", batch_id="a9",
                 reason="leader_change", inferred=False, v=1)]
    more = events.unionByName(spark.createDataFrame([tuple(r.get(n) for n in names) for r in late], EVENT_SCHEMA))
    from console.analytics.transforms import retracted_losses

    assert sorted(r.event_id for r in retracted_losses(more).collect()) == ["a9l", "f4d"]
    assert "a9" not in {r.batch_id for r in abandoned_batches(more).collect()}
