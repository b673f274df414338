"""Refusals of a full queue (429 10167), kept by batch: what a gap names, what a refused commit leaves."""

from datetime import datetime, timedelta, timezone

from console.domain import fast_busy
from console.domain.fast_busy import MAX_TAIL_RUNS, RefusedRuns

T0 = datetime(2026, 12, 3, tzinfo=timezone.utc)
WAIT, GIVE_UP = timedelta(seconds=1), timedelta(seconds=600)


def refuse(runs: RefusedRuns, seqs, batch="b1", commit_at=None, at=T0):
    return [runs.refused(batch, "S", "ok", s, s == commit_at, at) for s in seqs]


def test_the_first_refusal_of_a_batch_is_said_and_no_other():
    runs = RefusedRuns(10)
    said = refuse(runs, range(5, 9))
    assert said[0] is not None and said[0].first == 5 and said[1:] == [None] * 3


def test_a_gap_ack_names_the_refusals_before_it_and_a_refused_commit_leaves_the_rest_as_its_tail():
    runs = RefusedRuns(10)
    refuse(runs, [*range(5, 9), *range(20, 31)], commit_at=30)
    runs.gap("b1", 9)  # names 5..8
    assert runs.due(T0, WAIT, GIVE_UP) == []  # the racing replies are waited for
    [record] = runs.due(T0 + WAIT, WAIT, GIVE_UP)
    assert record.tail() == [(20, 30)] and runs.kept == 0 and not runs.batches


def test_a_puback_ends_it_with_nothing_to_say():
    runs = RefusedRuns(10)
    refuse(runs, range(5, 9))
    runs.ended("b1")
    assert runs.due(T0 + GIVE_UP, WAIT, GIVE_UP) == [] and runs.kept == 0


def test_a_tail_of_many_runs_is_said_in_at_most_ten_the_last_to_the_end():
    runs = RefusedRuns(10)
    refuse(runs, range(1, 100, 2), commit_at=99)
    [record] = runs.due(T0 + WAIT, WAIT, GIVE_UP)
    tail = record.tail()
    assert len(tail) == MAX_TAIL_RUNS and tail[0] == (1, 1) and tail[-1] == (19, 99)


def test_forged_refusals_are_bounded_a_batch_and_in_all_and_a_replay_counts_once(monkeypatch):
    monkeypatch.setattr(fast_busy, "MAX_KEPT_SEQS", 5)
    monkeypatch.setattr(fast_busy, "MAX_KEPT_IN_ALL", 8)
    runs = RefusedRuns(3)
    refuse(runs, [1, 1, 1, 2, 3, 4, 5, 6, 7])
    assert len(runs.batches["b1"].seqs) == 5 and runs.batches["b1"].uncounted == 2
    refuse(runs, range(1, 10), batch="b2")
    assert runs.kept == 8 and runs.batches["b2"].uncounted == 6
    for batch in ("b3", "b4"):  # the oldest record goes, and what it kept with it
        refuse(runs, [1], batch=batch)
    assert "b1" not in runs.batches and runs.kept == 3 + 1  # b2 kept 3; b3 found the cap full; b4 kept 1
    assert runs.due(T0 + GIVE_UP, WAIT, GIVE_UP) == [] and runs.kept == 0  # quiet records given up unsaid
