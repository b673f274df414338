"""The month's report counts what History's hourly tables count: the job's runs, not the ledger's
provisional rows that are ahead of them."""

from datetime import datetime, timezone

from sqlmodel import Session

from console.storage import report, sqlite
from console.storage.tables import AbandonedBatch, AbandonmentHourly


CONTEXT = {"leader_elections": 0, "stream_updates": 0, "other_abandonments": 0, "gaps_nearby": 0}


def test_a_publishers_losses_are_counted_as_the_hourly_tables_count_them(tmp_path):
    engine = sqlite.open_db(tmp_path / "console.db")
    at = datetime(2026, 11, 3, 10, 15, tzinfo=timezone.utc)
    with Session(engine) as s:
        s.add(AbandonedBatch(event_id="run", time=at, stream="ORDERS", batch_id="a", kind="atomic", reason="timeout",
                             publisher="orders (python3 2.16.0), user app, 10.0.0.1:5000, cid 7 on n1", log_seq=1, **CONTEXT))
        s.add(AbandonedBatch(event_id="ahead", time=at, stream="ORDERS", batch_id="b", kind="fast", reason="gap",
                             publisher="billing (go 1.43.0), user app, 10.0.0.2:5000, cid 9 on n1", log_seq=2, provisional=True,
                             **CONTEXT))
        s.add(AbandonmentHourly(hour=at.replace(minute=0), stream="ORDERS", kind="atomic", reason="timeout", batches=1))
        s.commit()
    month = (datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 12, 1, tzinfo=timezone.utc))
    assert report.by_publisher(engine, *month) == [{"publisher": "orders (python3 2.16.0)", "atomic": 1, "fast": 0}]
    assert sum(d["batches"] for d in report.by_day(engine, *month)) == 1
