"""The History page's queries with a week and with a year of history, side by side in one run.

    .venv/bin/python bench/history.py [--streams 20] [--repeats 5]

Two SQLite files written the way the analytics job writes them: one with 7 days of hourly
aggregates and lost batches, one with 365 days. The page's queries for the last 7 days run on
both (the ratio says whether a year of history slows the default view), and for the whole year
on the big one. A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlmodel import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.storage import history  # noqa: E402
from console.storage.sqlite import open_db  # noqa: E402
from console.storage.tables import AbandonedBatch, AbandonmentHourly, GapHourly  # noqa: E402

REASONS = ("timeout", "incomplete", "large", "unsupported")
END = datetime(2026, 11, 21, tzinfo=timezone.utc)


def fill(path: Path, days: int, streams: int) -> int:
    engine = open_db(path)
    rng = random.Random(days)
    rows = 0
    with Session(engine) as s:
        for h in range(days * 24):
            hour = END - timedelta(hours=h + 1)
            for n in range(streams):
                stream = f"S{n:02d}"
                s.add_all(AbandonmentHourly(hour=hour, stream=stream, kind="atomic", reason=r, batches=rng.randint(1, 5))
                          for r in REASONS)
                s.add(GapHourly(hour=hour, stream=stream, gap_mode="ok", gaps=rng.randint(0, 3), lost=rng.randint(0, 9)))
                s.add(AbandonedBatch(event_id=f"{h}.{n}", time=hour, stream=stream, batch_id=f"b{h}.{n}", kind="atomic",
                                     reason="timeout", log_seq=h, leader_elections=0, stream_updates=0,
                                     other_abandonments=0, gaps_nearby=0))
                rows += 6
            if h % 500 == 0:
                s.commit()
        s.commit()
    return rows


def page_load(engine, start: datetime, end: datetime) -> None:
    history.abandonments_by_hour(engine, start, end)
    history.abandonments_by_stream(engine, start, end)
    history.gaps_by_hour(engine, start, end)
    history.fast_outcomes(engine, start, end)
    history.abandoned_batches(engine, start, end)
    history.stream_stats(engine)


def timed(engine, start, end, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        page_load(engine, start, end)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        week_rows = fill(Path(tmp) / "week.db", 7, args.streams)
        print(f"  a week: {week_rows:,} rows; writing a year …", file=sys.stderr)
        year_rows = fill(Path(tmp) / "year.db", 365, args.streams)
        week, year = open_db(Path(tmp) / "week.db"), open_db(Path(tmp) / "year.db")
        last_week = (END - timedelta(days=7), END)
        small = timed(week, *last_week, args.repeats)
        big = timed(year, *last_week, args.repeats)
        whole = timed(year, END - timedelta(days=365), END, args.repeats)
    print(f"{'History page load (all its queries)':46}{'rows in db':>12}{'seconds':>10}")
    print(f"{'last 7 days, a week in the db':46}{week_rows:>12,}{small:>10.4f}")
    print(f"{'last 7 days, a year in the db':46}{year_rows:>12,}{big:>10.4f}")
    print(f"{'the whole year, a year in the db':46}{year_rows:>12,}{whole:>10.4f}")
    print(f"a year in the db / a week in the db, same 7-day view: {big / small:.2f}")


if __name__ == "__main__":
    main()
