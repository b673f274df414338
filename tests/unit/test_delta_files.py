"""The raw events table: files written into its directory and committed with the run's app transaction
(what a rerun checks to append nothing twice); under --follow one small file a run, compacted per day
without losing it. Real Delta files (deltalake)."""

from datetime import datetime, timedelta, timezone

import pyarrow as pa
from deltalake import DeltaTable

from console.storage import delta


def _events(first_seq: int, n: int, day: datetime) -> pa.Table:
    return pa.table({"seq": pa.array(range(first_seq, first_seq + n), pa.int64()),
                     "event_id": [f"e{s}" for s in range(first_seq, first_seq + n)],
                     "time": pa.array([day + timedelta(minutes=s) for s in range(n)], pa.timestamp("us", "UTC"))})


def test_a_crowded_day_is_compacted_and_its_app_transaction_kept(tmp_path):
    path = tmp_path / "events"
    day, other = datetime(2026, 3, 1, tzinfo=timezone.utc), datetime(2026, 3, 2, tzinfo=timezone.utc)
    for run in range(6):  # six follow-mode runs on one day, one on the next
        delta.append_events(path, _events(run * 10 + 1, 10, day), run * 10 + 10)
    delta.append_events(path, _events(61, 5, other), 65)
    before = DeltaTable(str(path)).to_pyarrow_table().sort_by("seq")

    assert delta.compact(path, ["2026-03-01", "2026-03-02"], most_files=4) == ["2026-03-01"]

    after = DeltaTable(str(path))
    assert len(after.file_uris(file_pruning_predicate=[("date", "=", "2026-03-01")])) == 1
    assert len(after.file_uris(file_pruning_predicate=[("date", "=", "2026-03-02")])) == 1
    assert after.to_pyarrow_table().sort_by("seq").equals(before)
    assert delta.written_up_to(path) == 65
    assert delta.append_events(path, _events(61, 5, other), 65) == 0  # a rerun still appends nothing
    assert delta.compact(path, ["2026-03-01"], most_files=4) == []  # nothing crowded: nothing done


def test_events_with_a_column_the_table_lacks_add_it(tmp_path):
    """A table written before a column existed (`unverified` came later) takes it on; its old rows read null."""
    path = tmp_path / "events"
    day = datetime(2026, 3, 1, tzinfo=timezone.utc)
    delta.append_events(path, _events(1, 3, day), 3)
    later = _events(4, 2, day).append_column("unverified", pa.array([True, False]))
    assert delta.append_events(path, later, 5) == 2
    rows = DeltaTable(str(path)).to_pyarrow_table().sort_by("seq").to_pylist()
    assert [(r["seq"], r["unverified"]) for r in rows] == [(1, None), (2, None), (3, None), (4, True), (5, False)]
    assert delta.written_up_to(path) == 5
