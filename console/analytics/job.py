"""The analytics job: new events from the event log -> Delta history and SQLite serving tables.

Exactly once, per run:
1. pin the range (last recorded offset + 1 .. the log's last sequence now);
2. read it in steps of at most `max_events` sequences: the executors read each step and write its
   raw events as Parquet files into the Delta table's directory, and the driver, which receives only
   a summary (the days, how many events, what was skipped), commits the files with an app transaction
   at the step's end (a rerun appends only what is past it);
3. recompute, once, the aggregates of what the new events touch: every hour of their days (read
   back from Delta with the day before, so batches and context windows that cross midnight are
   whole), the fast batches they belong to, the abandonments near them; replace those rows in
   Delta (one commit per table);
4. replace the same rows in SQLite and move the offset, in one transaction.
A run killed anywhere before 4 commits repeats the same range and writes the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, delete, select

from console.analytics.raw_events import STEP_SUMMARY_DDL, NewEvents, step_writer
from console.analytics.schema import EVENT_SCHEMA
from console.analytics.source import (
    JetStreamDataSource,
    SeqRange,
    SourceOptions,
    _first_history_seq,
    _read_range,
    _stream_bounds,
)
from console.analytics.transforms import (
    abandoned_batches,
    abandonment_hourly,
    capture_interruptions,
    consumer_lag_hourly,
    fast_batch_summary,
    gap_hourly,
    maintenances,
    retracted_losses,
    with_batch_stream,
    with_copy_number,
)
from console.broker.eventlog import missing_log
from console.analytics.budgets import budget_counts
from console.config import AnalyticsSettings
from console.domain.budgets import WINDOWS, Objective
from console.domain.display import as_utc
from console.domain.events import REPLAYED, key_mismatch
from console.errors import EventLogMissingError, KeyMismatchError
from console.storage import budgets as budget_store
from console.storage import delta, ledger, sqlite
from console.storage.tables import (
    EVENTS_SOURCE,
    HEARTBEATS_CHECKED,
    AbandonedBatch,
    AbandonmentHourly,
    CaptureInterruption,
    ConsumerLagHourly,
    FastBatchSummary,
    GapHourly,
    Maintenance,
    StreamAbandonmentStats,
)

log = logging.getLogger(__name__)

# The columns the aggregates read: the scope holds these alone (a busy log's acks carry the rest).
AGGREGATED_COLUMNS = ("seq", "event_id", "kind", "time", "stream", "batch_id", "reason", "gap_mode", "flow", "lost",
                      "count", "account", "detail", "unverified", "publisher", "batch_seq", "domain")
EVENT_ARROW_SCHEMA = to_arrow_schema(EVENT_SCHEMA, timezone="UTC")
AGGREGATES = ("abandonment_hourly", "gap_hourly", "fast_batch_summary", "abandoned_batches", "stream_abandonment_stats",
              "capture_interruptions", "maintenances", "budget_counts", "consumer_lag_hourly")


@dataclass(frozen=True)
class JobSettings:
    data_dir: Path
    source: SourceOptions = field(default_factory=SourceOptions)  # where the event log is read
    context_minutes: int = 5
    max_events: int = AnalyticsSettings.max_events  # event-log sequences read per step: an executor's memory bound
    # A step of fewer sequences is read and written by the driver itself (0: always the executors): a
    # following job's runs are a few events each, and the Python workers a Spark read starts (their
    # imports, their connections to NATS) cost more CPU than the events (0.13 cores under the demo).
    driver_reads_up_to: int = AnalyticsSettings.driver_reads_up_to
    system: str = ""  # of a systems file: the system, a column of every derived Delta table it writes
    objectives: tuple[Objective, ...] = ()  # loss budgets: each one's status is written after a run

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
    stages: dict[str, float] = field(default_factory=dict)  # seconds in each step of the run

    def breakdown(self) -> str:
        return ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.stages.items())

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
                f"{self.rows_written} rows written, {self.seconds:.1f}s ({self.breakdown()})")


class Stages:
    """Seconds spent in each step of a run: `with stages("read"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


def _quoted(values: Any) -> str:
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


def _records(table: pa.Table, drop: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """Rows for SQLite from the Arrow table already written to Delta, a batch at a time (a backlog's
    tables can be large). SQLite wants aware datetimes; Spark's are in the session zone, which is UTC."""
    for batch in table.to_batches(max_chunksize=5_000):
        for row in batch.to_pylist():
            yield {k: as_utc(v) if isinstance(v, datetime) else v for k, v in row.items() if k not in drop}


def run_once(session: Callable[[], SparkSession], settings: JobSettings,
             progress: Callable[[int, int], None] = lambda done, total: None, defer_heartbeats: int = 0) -> RunReport:
    """One run over everything the log holds past the offset; `progress(sequences read, of)` after
    each step. Up to `defer_heartbeats` new sequences holding nothing but the collector's heartbeat
    (asked of the server, without Spark) are left to the next run, which reads them with the rest:
    History is level with them, and an idle log costs no Spark job. `session` is asked for Spark only
    where the run needs it (a LazySession starts it then)."""
    started = time.perf_counter()
    stages = Stages()

    def spark() -> SparkSession:
        started_session = session()
        started_session.dataSource.register(JetStreamDataSource)
        return started_session

    engine = sqlite.open_db(settings.db_path)
    done = sqlite.offset(engine, EVENTS_SOURCE)
    options = settings.source
    try:
        with stages("bounds"):
            _, last = asyncio.run(_stream_bounds(options))
    except EventLogMissingError:
        return RunReport(done + 1, done, 0, 0, time.perf_counter() - started,
                         note=missing_log(options.stream))
    if last <= done:
        return RunReport(done + 1, done, 0, 0, time.perf_counter() - started)
    if last - done <= defer_heartbeats and options.subject == f"{options.prefix}.>":
        with stages("check"):
            try:
                history_at = asyncio.run(_first_history_seq(options, done + 1))
            except Exception as e:  # the run reads them all instead
                log.warning("could not check %d..%d for heartbeats alone: %r", done + 1, last, e)
                history_at = done + 1
        if history_at is None or history_at > last:
            sqlite.commit_run(engine, HEARTBEATS_CHECKED, last, lambda session: None)
            return RunReport(done + 1, done, 0, 0, time.perf_counter() - started,
                             note=f"events {done + 1}..{last}: heartbeats only, left for the next run")

    seen = NewEvents()
    raw_path = settings.delta("events")
    for first in range(done + 1, last + 1, settings.max_events):
        end = min(last, first + settings.max_events - 1)
        with stages("read and write"):
            writer = step_writer(str(raw_path.resolve()), delta.written_up_to(raw_path))  # executors have their own cwd
            if end - first < settings.driver_reads_up_to:  # the same reader and writer, in the driver's process
                rows = asyncio.run(_read_range(options, SeqRange(first, end)))
                summary = pa.Table.from_batches(writer(iter([_arrow_batch(rows)])))
            else:  # one Spark job per step: the executors write, the driver gets a summary
                reader = spark().read.format("jetstream").options(**options.to_options())
                step = reader.option("start_seq", first).option("end_seq", end).load()
                summary = step.mapInArrow(writer, STEP_SUMMARY_DDL).toArrow()
            files = seen.add(summary)
        if seen.key_wrong:  # nothing the collector wrote verified: History would be empty without a word
            raise KeyMismatchError(key_mismatch(options.key_source or "the job's options"))
        with stages("commit"):
            delta.add_files(raw_path, files, end)
        progress(end - done, last - done)
    written = 0
    if seen.history == 0 and settings.objectives and seen.days:  # stream totals alone: only the budgets move
        with stages("scope"):
            scope, _ = _scope(spark(), raw_path, sorted(seen.days), done)
        with stages("budgets"):
            written = _budget_counts_only(settings, engine, scope, sorted(seen.days), last)
    elif seen.history == 0:  # nothing an aggregate counts: the offset moves past it
        sqlite.commit_run(engine, EVENTS_SOURCE, last, lambda session: ledger.settle(session, last))
    else:
        days = sorted(seen.days)
        with stages("compact"):
            if delta.compact(raw_path, [d.isoformat() for d in days]):
                for name in AGGREGATES:  # their replaced files go at the same pace
                    delta.vacuum(settings.delta(name))
        with stages("scope"):
            scope, replays = _scope(spark(), raw_path, days, done)
        if replays:
            seen.skipped[REPLAYED] += replays
        written = _recompute(settings, engine, scope, days, done, seen, last, stages)
    return RunReport(done + 1, last, seen.count, written, time.perf_counter() - started, skipped=dict(seen.skipped),
                     stages=stages.seconds)


def _arrow_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """The source's rows as the record batch Spark would hand the step's writer."""
    columns: list[Any] = list(zip(*rows)) or [[] for _ in EVENT_ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(columns, EVENT_ARROW_SCHEMA)],
                                      schema=EVENT_ARROW_SCHEMA)


def _with_day(hourly: DataFrame) -> DataFrame:
    return hourly.withColumn("day", F.to_date("hour").cast("string"))


def _scope(spark: SparkSession, raw_path: Path, days: list[date], done: int) -> tuple[DataFrame, int]:
    """All stored events of these days and the day before each, from Delta, each once (the first copy
    stored) with its fast batch's stream filled (once, for every aggregate); and how many of the new
    events (past `done`) are copies of an event stored before them. A copy is in its original's
    partition: both are dated by the event's own time, which the signed body carries."""
    wanted = sorted({d - timedelta(days=back) for d in days for back in (0, 1)})
    files = delta.read_files(raw_path, [("date", "in", [d.isoformat() for d in wanted])])
    events = spark.read.schema(EVENT_SCHEMA).parquet(*files).select(*AGGREGATED_COLUMNS)
    # A checkpoint, not a cache: the aggregates plan over its rows, not over the read and the join
    # again (persist() made a small run's aggregates twice as slow). Its blocks go with the object.
    numbered = with_copy_number(with_batch_stream(events)).localCheckpoint()
    replays = numbered.filter((F.col("copy") > 1) & (F.col("seq") > done)).count()
    return numbered.filter(F.col("copy") == 1).drop("copy"), replays


def _recompute(settings: JobSettings, engine: Engine, scope: DataFrame, days: list[date], done: int, seen: NewEvents,
               last: int, stages: Stages) -> int:
    """Replace the rows of what the new events (past `done`) touch: the hours of their days, the fast
    batches they belong to, the abandonments of their days (and the losses a retraction among them
    took back), the figures of the streams those abandonments are on."""
    # Independent Spark jobs over the checkpointed scope, each planned and run in a thread of its
    # own: they overlap (a small run's jobs are mostly planning and scheduling, not work). Each
    # comes back once, as Arrow: Delta takes the table, SQLite its rows.
    jobs = _aggregates(settings, scope, days, done, seen)
    with stages("aggregates"), ThreadPoolExecutor(len(jobs)) as pool:
        tables = dict(zip(jobs, pool.map(lambda plan: plan().toArrow(), jobs.values())))
    hourly_a, hourly_g, lost_table = tables["hourly abandonments"], tables["hourly gaps"], tables["abandoned"]
    blind, kept_up, counts = tables["blind windows"], tables["maintenances"], tables.get("budget counts")
    lag = tables["consumer lag"]
    batches = tables.get("fast batches", pa.table({"batch_id": pa.array([], pa.string())}))
    touched = batches["batch_id"].to_pylist()
    lost_rows = list(_records(lost_table))
    retracted = tables["retracted"]["event_id"].to_pylist() if seen.retractions else []
    lost_ids = [r["event_id"] for r in lost_rows] + retracted  # a retracted loss's row goes
    with stages("delta"):
        by_day = f"day IN ({_quoted(d.isoformat() for d in days)})"
        _put(settings, "abandonment_hourly", hourly_a, by_day)
        _put(settings, "gap_hourly", hourly_g, by_day)
        _put(settings, "capture_interruptions", blind, by_day)
        _put(settings, "maintenances", kept_up, by_day)
        _put(settings, "consumer_lag_hourly", lag, by_day)
        if counts is not None:
            _put(settings, "budget_counts", counts, by_day)
        if touched:
            _put(settings, "fast_batch_summary", batches, f"batch_id IN ({_quoted(touched)})")
        if lost_ids:
            _put(settings, "abandoned_batches", lost_table, f"event_id IN ({_quoted(lost_ids)})")
    with stages("stream stats"):
        streams, rows_s = _stream_stats(engine, lost_rows, lost_ids)
        if streams:
            _put(settings, "stream_abandonment_stats", pa.Table.from_pylist(rows_s, STATS_SCHEMA),
                 f"stream IN ({_quoted(streams)})")
    day_bounds = _day_bounds(days)

    def writes(session: Any) -> None:
        ledger.settle(session, last)
        for model, column, rows in ((AbandonmentHourly, AbandonmentHourly.hour, hourly_a),
                                    (GapHourly, GapHourly.hour, hourly_g),
                                    (CaptureInterruption, CaptureInterruption.start, blind),
                                    (Maintenance, Maintenance.end, kept_up),
                                    (ConsumerLagHourly, ConsumerLagHourly.hour, lag)):
            for lo, hi in day_bounds:
                session.exec(delete(model).where(col(column) >= lo, col(column) < hi))
            sqlite.insert_rows(session, model, _records(rows, drop=("day",)))
        sqlite.replace_rows(session, FastBatchSummary, ("batch_id",), [(b,) for b in touched], _records(batches))
        sqlite.replace_rows(session, AbandonedBatch, ("event_id",), [(i,) for i in lost_ids], lost_rows)
        sqlite.replace_rows(session, StreamAbandonmentStats, ("stream",), [(s,) for s in streams], rows_s)
        if counts is not None:
            budget_store.replace_counts(session, day_bounds, _records(counts, drop=("day",)))

    with stages("sqlite"):
        sqlite.commit_run(engine, EVENTS_SOURCE, last, writes)
    if settings.objectives:
        with stages("budgets"):
            _budgets(settings, engine)
    return int(hourly_a.num_rows + hourly_g.num_rows + batches.num_rows + len(lost_rows) + len(rows_s) + blind.num_rows
               + kept_up.num_rows + lag.num_rows)


def _aggregates(settings: JobSettings, scope: DataFrame, days: list[date], done: int,
                seen: NewEvents) -> dict[str, Callable[[], DataFrame]]:
    """The aggregates a run recomputes over its scope, each as a function that plans it (the batches
    with an event past `done`; the losses retracted only when a retraction is among the new events)."""

    def of_days() -> DataFrame:  # the day before is in the scope for its batches' streams
        return scope.filter(F.to_date("time").isin(*days))

    def touched_batches() -> DataFrame:
        if done == 0:  # the first run: every event is new, every batch touched
            return fast_batch_summary(scope, filled=True)
        new = scope.filter((F.col("seq") > done) & F.col("kind").startswith("fast_") & F.col("batch_id").isNotNull())
        return fast_batch_summary(scope.join(new.select("batch_id").distinct(), "batch_id", "left_semi"), filled=True)

    jobs = {"hourly abandonments": lambda: _with_day(abandonment_hourly(of_days(), filled=True)),
            "hourly gaps": lambda: _with_day(gap_hourly(of_days(), filled=True)),
            "abandoned": lambda: abandoned_batches(scope, settings.context_minutes, filled=True).filter(
                F.to_date("time").isin(*days)),
            "blind windows": lambda: capture_interruptions(of_days()).withColumn(
                "day", F.to_date("start").cast("string")),
            "maintenances": lambda: maintenances(of_days()).withColumn("day", F.to_date("end").cast("string")),
            "consumer lag": lambda: _with_day(consumer_lag_hourly(of_days()))}
    if settings.objectives:  # counted only for objectives: a console without them pays nothing
        jobs["budget counts"] = lambda: _counts_of_days(scope, days)
    if seen.fast:
        jobs["fast batches"] = touched_batches
    if seen.retractions:
        jobs["retracted"] = lambda: retracted_losses(scope)
    return jobs


def _counts_of_days(scope: DataFrame, days: list[date]) -> DataFrame:
    """The budget counts of these days, over the whole scope: a day's first totals grow from the day before's last."""
    return budget_counts(scope).filter(F.to_date("bucket").isin(*days)).withColumn(
        "day", F.to_date("bucket").cast("string"))


def _day_bounds(days: list[date]) -> list[tuple[datetime, datetime]]:
    """Each day as [its midnight, the next), in UTC: what a day's rows in SQLite are replaced over."""
    midnights = [datetime.combine(d, datetime.min.time(), tzinfo=timezone.utc) for d in days]
    return [(m, m + timedelta(days=1)) for m in midnights]


def _put(settings: JobSettings, name: str, rows: pa.Table, predicate: str) -> None:
    """A derived table's rows into Delta, each with its system when the job runs on a systems file's system."""
    if settings.system:
        rows = rows.append_column("system", pa.array([settings.system] * rows.num_rows, pa.string()))
    delta.replace_where(settings.delta(name), rows, predicate)


def _budget_counts_only(settings: JobSettings, engine: Engine, scope: DataFrame, days: list[date], last: int) -> int:
    """A run of stream totals alone: the budget counts of their days and the statuses, the offset moved."""
    counts = _counts_of_days(scope, days).toArrow()
    _put(settings, "budget_counts", counts, f"day IN ({_quoted(d.isoformat() for d in days)})")
    sqlite.commit_run(engine, EVENTS_SOURCE, last, lambda session: budget_store.replace_counts(
        session, _day_bounds(days), _records(counts, drop=("day",))))
    _budgets(settings, engine)
    return int(counts.num_rows)


def _budgets(settings: JobSettings, engine: Engine) -> None:
    """Each objective's status as of now, from the counts of its window (and the longest burn window)."""
    statuses = budget_store.statuses_now(list(settings.objectives), engine)
    budget_store.write_statuses(engine, statuses)
    delta.replace_where(settings.delta("budget_status"), pa.Table.from_pylist(
        [{"objective": s.objective, "measure": s.measure, "as_of": s.as_of, "lost": s.counts.lost,
          "total": s.counts.total, "known": s.counts.known, "spent": s.spent,
          **{f"burn_{w}": b for w, b in s.burns.items()}} for s in statuses], BUDGET_STATUS_SCHEMA), None)


BUDGET_STATUS_SCHEMA = pa.schema([("objective", pa.string()), ("measure", pa.string()),
                                  ("as_of", pa.timestamp("us", "UTC")), ("lost", pa.int64()), ("total", pa.int64()),
                                  ("known", pa.bool_()), ("spent", pa.float64())]
                                 + [(f"burn_{w}", pa.float64()) for w in WINDOWS])
STATS_SCHEMA = pa.schema([("stream", pa.string()), ("abandonments", pa.int64()), ("first", pa.timestamp("us", "UTC")),
                          ("last", pa.timestamp("us", "UTC")), ("mean_seconds", pa.float64())])


def stream_stats(times: dict[str, list[datetime]]) -> list[dict[str, Any]]:
    """Per stream with abandonments: how many, the first, the last and the mean seconds between them
    (None with fewer than two)."""
    rows = []
    for stream, seen in sorted(times.items()):
        if seen:
            first, last, n = min(seen), max(seen), len(seen)
            rows.append({"stream": stream, "abandonments": n, "first": first, "last": last,
                         "mean_seconds": (last - first).total_seconds() / (n - 1) if n > 1 else None})
    return rows


def _stream_stats(engine: Engine, lost_rows: list[dict[str, Any]], replaced: list[str]
                  ) -> tuple[list[str], list[dict[str, Any]]]:
    """The streams whose abandonments this run changes, and their figures from every abandonment kept
    so far: the serving table's rows with this run's in place of the ones it replaces (a per-run cost
    that grows with the run, not with the history)."""
    replaced_ids = set(replaced)
    streams = {r["stream"] for r in lost_rows}
    with Session(engine) as session:
        for ids in sqlite.chunks(list(replaced_ids)):
            streams.update(session.exec(select(AbandonedBatch.stream).where(col(AbandonedBatch.event_id).in_(ids))))
        times: dict[str, list[datetime]] = {s: [] for s in streams}
        ordered = sorted(streams)
        query = select(AbandonedBatch.stream, AbandonedBatch.event_id, AbandonedBatch.time)
        for names in sqlite.chunks(ordered):
            for stream, event_id, when in session.exec(query.where(col(AbandonedBatch.stream).in_(names))):
                if event_id not in replaced_ids:
                    times[stream].append(as_utc(when))
    for row in lost_rows:
        times[row["stream"]].append(row["time"])
    return ordered, stream_stats(times)


RETURNS_MEMORY = "-XX:+UseG1GC -XX:G1PeriodicGCInterval=15000 -XX:MinHeapFreeRatio=5 -XX:MaxHeapFreeRatio=15"
# The JIT's first tier only: a following job's runs are small and each plans new code, which the
# second tier compiled again and again (a small run cost 3.45 s of CPU with it, 2.06 s without:
# README, "Keep the history"); --full-jit gives the second tier back, for a job working through a backlog.
QUICK_JIT = "-XX:TieredStopAtLevel=1"


class LazySession:
    """The Spark session a process's runs share, started by the first run that needs Spark: until a
    loss or a batch reaches the log (a quiet system: heartbeats, canaries read in the driver), the
    analytics part holds no JVM."""

    def __init__(self, start: Callable[[], SparkSession]):
        self._start = start
        self._session: SparkSession | None = None

    def __call__(self) -> SparkSession:
        if self._session is None:
            self._session = self._start()
        return self._session

    def stop(self) -> None:
        if self._session is not None:
            self._session.stop()


def spark_session(master: str | None = None, app_name: str = "batch-console-analytics",
                  remote: str | None = None, keep_workers: bool = False, driver_memory: str = "4g",
                  full_jit: bool = False) -> SparkSession:
    """A session the job can run on: the workers use this interpreter, the UI is off. With no
    master, the one spark-submit was given, or local when run directly; with `remote`, a session
    on that Spark Connect server (whose own configuration holds: only the job's SQL settings are set)."""
    import os
    import sys

    sql_settings: dict[str, bool | float | int | str | None] = {"spark.sql.session.timeZone": "UTC",
                                                               "spark.sql.shuffle.partitions": "4"}
    if remote:
        return SparkSession.builder.remote(remote).appName(app_name).config(map=sql_settings).getOrCreate()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if master is None or master.startswith("local"):
        if not keep_workers:  # a local session idles beside the rest of the console: a worker kept holds ~120-190 MiB
            builder = builder.config("spark.python.factory.idleWorkerMaxPoolSize", "1")
        builder = (builder
                   # pooled direct buffers for shuffles and block transfers, never returned: one JVM has no peer
                   .config("spark.shuffle.io.preferDirectBufs", "false")
                   .config("spark.network.io.preferDirectBufs", "false"))
    # Spark's cleaner frees a finished run's checkpoint and broadcast blocks only once a full garbage
    # collection finds them unreferenced, and asks for one every 30 min; --follow runs every few seconds.
    builder = builder.config("spark.cleaner.periodicGC.interval", "1min")
    # No event comes to the driver; but in local mode its JVM also runs the tasks and caches the run's
    # scope, and 1g was too little to aggregate a 5,000,000-event backlog's days. On a cluster the
    # executors hold them, and --driver-memory can be small.
    builder = (builder.config("spark.driver.memory", driver_memory)
               # The heap may grow to the limit for a big backlog, and gives back what it no longer uses:
               # a side tool's JVM idles at a few hundred MiB, not at its last peak.
               .config("spark.driver.extraJavaOptions", RETURNS_MEMORY + ("" if full_jit else " " + QUICK_JIT))
               .config("spark.driver.maxResultSize", "2g")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config(map=sql_settings))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
