"""The analytics job: new events from the event log -> Delta history and SQLite serving tables.

Exactly once, per run:
1. pin the range (last recorded offset + 1 .. the log's last sequence now) and read it once;
2. append the raw events to Delta with an app transaction at the range's end (a rerun appends
   only what is past it);
3. recompute the aggregates for what the new events touch: every hour of their days (read back
   from Delta with the day before, so batches and context windows that cross midnight are
   whole), the fast batches they belong to, the abandonments near them; replace those rows in
   Delta (one commit per table);
4. replace the same rows in SQLite and move the offset, in one transaction.
A run killed anywhere before 4 commits repeats the same range and writes the same rows.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlmodel import delete

from console.analytics.schema import EVENT_SCHEMA, SKIPPED_KIND
from console.analytics.source import JetStreamDataSource, SourceOptions, _stream_bounds
from console.analytics.transforms import (
    abandoned_batches,
    abandonment_hourly,
    fast_batch_summary,
    gap_hourly,
    retracted_losses,
    stream_abandonment_stats,
)
from console.broker.eventlog import missing_log
from console.errors import EventLogMissingError
from console.storage import delta, sqlite
from console.storage.tables import (
    AbandonedBatch,
    AbandonmentHourly,
    FastBatchSummary,
    GapHourly,
    StreamAbandonmentStats,
)

SOURCE = "events"


@dataclass(frozen=True)
class JobSettings:
    data_dir: Path
    source: dict = field(default_factory=dict)  # options of the jetstream data source
    context_minutes: int = 5

    @property
    def db_path(self) -> Path:
        return self.data_dir / "console.db"

    def delta(self, name: str) -> Path:
        return self.data_dir / "delta" / name


@dataclass(frozen=True)
class RunReport:
    first_seq: int
    last_seq: int
    events_read: int
    rows_written: int
    seconds: float
    note: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # records of the log that were not events, by reason

    def line(self) -> str:
        if self.note:
            return f"{self.note}, {self.seconds:.1f}s"
        if self.events_read == 0 and not self.skipped:
            return f"no new events (offset {self.last_seq}), {self.seconds:.1f}s"
        skipped = ""
        if self.skipped:
            reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items()))
            skipped = f", {sum(self.skipped.values())} skipped ({reasons})"
        return (f"events {self.first_seq}..{self.last_seq}: {self.events_read} read{skipped}, "
                f"{self.rows_written} rows written, {self.seconds:.1f}s")


def _quoted(values) -> str:
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


def _records(table: pa.Table, drop: tuple[str, ...] = ()) -> list[dict]:
    """Rows for SQLite from the Arrow table already written to Delta. SQLite wants aware
    datetimes; Spark's are in the session zone, which is UTC."""
    return [
        {k: v.replace(tzinfo=timezone.utc) if isinstance(v, datetime) and v.tzinfo is None else v
         for k, v in row.items() if k not in drop}
        for row in table.to_pylist()
    ]


def run_once(spark: SparkSession, settings: JobSettings) -> RunReport:
    started = time.perf_counter()
    spark.dataSource.register(JetStreamDataSource)
    engine = sqlite.open_db(settings.db_path)
    done = sqlite.offset(engine, SOURCE)
    options = SourceOptions.parse(settings.source)
    try:
        _, last = asyncio.run(_stream_bounds(options))
    except EventLogMissingError:
        return RunReport(done + 1, done, 0, 0, time.perf_counter() - started,
                         note=missing_log(options.stream))
    if last <= done:
        return RunReport(done + 1, done, 0, 0, time.perf_counter() - started)

    reader = spark.read.format("jetstream").options(**settings.source)
    loaded = reader.option("start_seq", done + 1).option("end_seq", last).load().localCheckpoint()
    is_skipped = F.col("kind") == SKIPPED_KIND
    skipped = {r.reason: r["count"] for r in loaded.filter(is_skipped).groupBy("reason").count().collect()}
    new = loaded.filter(~is_skipped)
    events_read = new.count()
    if events_read == 0:  # only records that were not events: the offset moves past them
        sqlite.commit_run(engine, SOURCE, last, lambda session: None)
        return RunReport(done + 1, last, 0, 0, time.perf_counter() - started, skipped=skipped)

    raw_path = settings.delta("events")
    delta.append_events(raw_path, new.toArrow(), last)

    days = sorted({r.day for r in new.select(F.to_date("time").alias("day")).distinct().collect()})
    scope = _scope(spark, raw_path, days)
    written = _recompute(spark, settings, engine, new, scope, days, last)
    return RunReport(done + 1, last, events_read, written, time.perf_counter() - started, skipped=skipped)


def _scope(spark: SparkSession, raw_path: Path, days: list[date]) -> DataFrame:
    """All stored events of these days and the day before each, from Delta."""
    wanted = sorted({d - timedelta(days=back) for d in days for back in (0, 1)})
    files = delta.read_files(raw_path, [("date", "in", [d.isoformat() for d in wanted])])
    return spark.read.schema(EVENT_SCHEMA).parquet(*files).localCheckpoint()


def _recompute(spark, settings: JobSettings, engine, new: DataFrame, scope: DataFrame, days: list[date], last: int) -> int:
    day_strings = [d.isoformat() for d in days]
    in_days = F.to_date("hour").isin(*days)
    hourly_a = abandonment_hourly(scope).filter(in_days).withColumn("day", F.to_date("hour").cast("string"))
    hourly_g = gap_hourly(scope).filter(in_days).withColumn("day", F.to_date("hour").cast("string"))

    touched = [r.batch_id for r in new.filter(F.col("kind").startswith("fast_")).select("batch_id").distinct().collect()
               if r.batch_id is not None]
    batches = fast_batch_summary(scope.filter(F.col("batch_id").isin(*touched))) if touched else None

    lost = abandoned_batches(scope, settings.context_minutes).filter(F.to_date("time").isin(*days))
    retracted = [r.event_id for r in retracted_losses(scope).collect()]

    # Each aggregate is computed once, to Arrow: Delta takes the table, SQLite its rows.
    by_day = f"day IN ({_quoted(day_strings)})"
    hourly_a_rows, hourly_g_rows = hourly_a.toArrow(), hourly_g.toArrow()
    delta.replace_where(settings.delta("abandonment_hourly"), hourly_a_rows, by_day)
    delta.replace_where(settings.delta("gap_hourly"), hourly_g_rows, by_day)
    rows_a, rows_g = _records(hourly_a_rows, drop=("day",)), _records(hourly_g_rows, drop=("day",))
    rows_b: list[dict] = []
    if batches is not None:
        batch_rows = batches.toArrow()
        delta.replace_where(settings.delta("fast_batch_summary"), batch_rows, f"batch_id IN ({_quoted(touched)})")
        rows_b = _records(batch_rows)
    lost_table = lost.toArrow()
    lost_rows = _records(lost_table)
    rows_s: list[dict] = []
    lost_ids = [r["event_id"] for r in lost_rows] + retracted  # a retracted loss's row goes
    if lost_ids:
        delta.replace_where(settings.delta("abandoned_batches"), lost_table, f"event_id IN ({_quoted(lost_ids)})")
        # per-stream figures from every abandonment kept so far (one row each: small)
        stats = stream_abandonment_stats(spark.read.parquet(*delta.read_files(settings.delta("abandoned_batches"))))
        stats_rows = stats.toArrow()
        delta.replace_where(settings.delta("stream_abandonment_stats"), stats_rows, None)
        rows_s = _records(stats_rows)
    midnights = [datetime.combine(d, datetime.min.time(), tzinfo=timezone.utc) for d in days]
    day_bounds = [(m, m + timedelta(days=1)) for m in midnights]

    def writes(session):
        for model in (AbandonmentHourly, GapHourly):
            for lo, hi in day_bounds:
                session.exec(delete(model).where(model.hour >= lo, model.hour < hi))
        session.add_all(AbandonmentHourly(**r) for r in rows_a)
        session.add_all(GapHourly(**r) for r in rows_g)
        sqlite.replace_rows(session, FastBatchSummary, ("batch_id",), [(b,) for b in touched], rows_b)
        sqlite.replace_rows(session, AbandonedBatch, ("event_id",), [(i,) for i in lost_ids], lost_rows)
        sqlite.replace_rows(session, StreamAbandonmentStats, ("stream",), [(r["stream"],) for r in rows_s], rows_s)

    sqlite.commit_run(engine, SOURCE, last, writes)
    return len(rows_a) + len(rows_g) + len(rows_b) + len(lost_rows) + len(rows_s)


def spark_session(master: str | None = None, app_name: str = "batch-console-analytics") -> SparkSession:
    """A session the job can run on: the workers use this interpreter, the UI is off. With no
    master, the one spark-submit was given, or local when run directly."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    return (
        # The driver collects a run's new events to append them to Delta (deltalake writes from the
        # driver): room for a million events per run.
        builder.config("spark.driver.memory", os.environ.get("BATCH_CONSOLE_DRIVER_MEMORY", "4g"))
        .config("spark.driver.maxResultSize", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
