"""The History page's queries on a real SQLite file, rows written out by hand."""

from datetime import datetime, timedelta, timezone

from sqlmodel import Session

from console.storage import history
from console.storage.sqlite import open_db
from console.storage.tables import AbandonedBatch, AbandonmentHourly, FastBatchSummary, GapHourly

H = datetime(2026, 11, 20, 9, tzinfo=timezone.utc)


def test_history_queries_sum_the_aggregates_inside_the_range(tmp_path):
    engine = open_db(tmp_path / "console.db")
    with Session(engine) as s:
        s.add_all([
            AbandonmentHourly(hour=H, stream="A", kind="atomic", reason="timeout", batches=3),
            AbandonmentHourly(hour=H, stream="B", kind="atomic", reason="timeout", batches=2),
            AbandonmentHourly(hour=H + timedelta(hours=1), stream="A", kind="fast", reason="gap", batches=1),
            AbandonmentHourly(hour=H - timedelta(days=3), stream="A", kind="atomic", reason="timeout", batches=50),
            GapHourly(hour=H, stream="F", gap_mode="ok", gaps=2, lost=7),
            FastBatchSummary(batch_id="f1", stream="F", started=H, outcome="committed", gaps=2, lost=7, errors=0),
            FastBatchSummary(batch_id="f2", stream="F", started=H, outcome="ended_early", gaps=1, lost=1, errors=0),
            AbandonedBatch(event_id="e1", time=H + timedelta(minutes=5), stream="A", batch_id="b1", kind="atomic",
                           reason="timeout", log_seq=4, leader_elections=0, stream_updates=1, other_abandonments=2,
                           gaps_nearby=0),
        ])
        s.commit()
    start, end = H - timedelta(hours=1), H + timedelta(hours=2)
    by_hour = history.abandonments_by_hour(engine, start, end)
    assert by_hour.values.tolist() == [[H, "timeout", 5], [H + timedelta(hours=1), "gap", 1]]
    assert history.abandonments_by_stream(engine, start, end).values.tolist() == [
        ["A", "atomic", "timeout", 3], ["B", "atomic", "timeout", 2], ["A", "fast", "gap", 1]]
    assert history.gaps_by_hour(engine, start, end).values.tolist() == [[H, 2, 7]]
    assert sorted(history.fast_outcomes(engine, start, end).values.tolist()) == [["committed", 1, 7], ["ended_early", 1, 1]]
    [lost] = history.abandoned_batches(engine, batch_id="b1").to_dict("records")
    assert (lost["stream"], lost["time"], lost["other_abandonments"]) == ("A", H + timedelta(minutes=5), 2)
    assert len(history.abandoned_batches(engine, start=H + timedelta(hours=1))) == 0
