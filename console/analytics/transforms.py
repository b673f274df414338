"""Pure transforms over events in EVENT_SCHEMA: DataFrame in, DataFrame out, no I/O.

A fast batch's stream is known only from its PubAck (or the publish-side tap), so its earlier
events carry none: `with_batch_stream` fills it from any event of the same batch, and rows
whose stream is still not known use UNKNOWN_STREAM, never a guess. Each transform fills it
unless told its events are `filled` already (the job fills a run's scope once for all of them).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from console.domain.events import ATOMIC_KINDS, LOST_KINDS, UNKNOWN_STREAM, UNTIL, EventKind

ATOMIC_LOSSES = tuple(kind.value for kind in ATOMIC_KINDS)
FAST_ENDED_EARLY = EventKind.FAST_ENDED_EARLY.value
FAST_DROPPED = EventKind.FAST_DROPPED.value
FAST_LOST = EventKind.FAST_LOST.value
LOSS_RETRACTED = EventKind.LOSS_RETRACTED.value
FAST_COMMITTED = EventKind.FAST_COMMITTED.value
FAST_GAP = EventKind.FAST_GAP.value
FAST_ERROR = EventKind.FAST_ERROR.value
CONTEXT = EventKind.CONTEXT.value
MAINTENANCE = EventKind.MAINTENANCE.value
CONSUMER_LAG = EventKind.CONSUMER_LAG.value
LAG_ROWS = "array<struct<s:string,c:string,p:long,a:long,l:double,st:string>>"  # domain.consumer_lag.lag_records
ABANDONMENT_KINDS = tuple(kind.value for kind in LOST_KINDS)


def _hour(col: str = "time") -> Column:
    return F.date_trunc("hour", F.col(col)).alias("hour")


def _is_fast() -> Column:
    return F.col("kind").startswith("fast_")


def with_batch_stream(events: DataFrame) -> DataFrame:
    """Each fast event's stream, from whichever event of its batch knows it; UNKNOWN_STREAM otherwise."""
    known = F.first("stream", ignorenulls=True).over(Window.partitionBy("batch_id"))
    filled = F.when(_is_fast(), F.coalesce(F.col("stream"), known)).otherwise(F.col("stream"))
    return events.withColumn("stream", F.coalesce(filled, F.lit(UNKNOWN_STREAM)))


def with_copy_number(events: DataFrame) -> DataFrame:
    """`copy`: 1 for the first stored record of each event id (the lowest sequence), 2.. for every later
    copy (a replay, or a duplicate stored after the event log's duplicate window)."""
    return events.withColumn("copy", F.row_number().over(Window.partitionBy("event_id").orderBy("seq")))


def _filled(events: DataFrame, filled: bool) -> DataFrame:
    return events if filled else with_batch_stream(events)


def with_abandonment_reason(events: DataFrame) -> DataFrame:
    """kind_of_batch (atomic | fast) and the reason a batch was lost: the advisory's reason for atomic
    batches, gap / error for a fail-mode early end, dropped for an inferred drop."""
    return events.withColumn(
        "batch_kind", F.when(F.col("kind").isin(*ATOMIC_LOSSES), "atomic").otherwise("fast")
    ).withColumn(
        "reason", F.when(F.col("kind") == FAST_DROPPED, F.lit("dropped")).otherwise(F.col("reason"))
    )


def losses(events: DataFrame) -> DataFrame:
    """The loss events that still stand: a loss that a later reply retracted is none (a fast batch's, or an
    atomic batch's whose commit was answered after it was said lost)."""
    lost = events.filter(F.col("kind").isin(*ABANDONMENT_KINDS))
    retracted = events.filter(F.col("kind") == LOSS_RETRACTED).select(
        F.col("batch_id").alias("_retracted_batch"), F.col("time").alias("_retracted_at"))
    overruled = (F.col("batch_id") == F.col("_retracted_batch")) & (F.col("_retracted_at") >= F.col("time"))
    return lost.join(retracted, overruled, "left_anti")


def retracted_losses(events: DataFrame) -> DataFrame:
    """event_id of each loss a later reply retracted: rows to take out of the tables."""
    lost = events.filter(F.col("kind").isin(*ABANDONMENT_KINDS)).select("event_id")
    return lost.join(losses(events).select("event_id"), "event_id", "left_anti")


def abandonment_hourly(events: DataFrame, filled: bool = False) -> DataFrame:
    """hour, stream, kind (atomic | fast), reason, batches."""
    lost = with_abandonment_reason(losses(_filled(events, filled)))
    return (
        lost.groupBy(_hour(), "stream", F.col("batch_kind").alias("kind"), "reason")
        .agg(F.countDistinct("batch_id").alias("batches"))
    )


def gap_hourly(events: DataFrame, filled: bool = False) -> DataFrame:
    """hour, stream, gap_mode, gaps, lost messages."""
    gaps = _filled(events, filled).filter(F.col("kind") == FAST_GAP)
    return gaps.groupBy(_hour(), "stream", "gap_mode").agg(
        F.count("*").alias("gaps"), F.sum("lost").cast("long").alias("lost")
    )


def fast_batch_summary(events: DataFrame, filled: bool = False) -> DataFrame:
    """One row per fast batch: stream, started, ended, outcome, messages stored, gaps, lost, errors,
    min and max flow. Outcome: committed > ended_early > lost (10208) > dropped > open (a later
    commit overrules an inferred drop). In ok mode the server's count includes lost messages;
    stored = count - lost."""
    fast = _filled(events, filled).filter(_is_fast() & F.col("batch_id").isNotNull())
    terminal = F.col("kind").isin(FAST_COMMITTED, FAST_ENDED_EARLY, FAST_LOST, FAST_DROPPED)
    summary = fast.groupBy("batch_id").agg(
        F.first("stream").alias("stream"),
        F.min("time").alias("started"),
        F.max(F.when(terminal, F.col("time"))).alias("ended"),
        F.max((F.col("kind") == FAST_COMMITTED).cast("int")).alias("_committed"),
        F.max((F.col("kind") == FAST_ENDED_EARLY).cast("int")).alias("_ended"),
        F.max((F.col("kind") == FAST_DROPPED).cast("int")).alias("_dropped"),
        F.max((F.col("kind") == FAST_LOST).cast("int")).alias("_lost"),
        F.max(F.when(F.col("kind").isin(FAST_COMMITTED, FAST_ENDED_EARLY), F.col("count"))).alias("_count"),
        F.first("gap_mode", ignorenulls=True).alias("gap_mode"),
        F.sum((F.col("kind") == FAST_GAP).cast("long")).alias("gaps"),
        F.coalesce(F.sum(F.when(F.col("kind") == FAST_GAP, F.col("lost"))), F.lit(0)).cast("long").alias("lost"),
        F.sum((F.col("kind") == FAST_ERROR).cast("long")).alias("errors"),
        F.min("flow").alias("min_flow"),
        F.max("flow").alias("max_flow"),
    )
    outcome = (
        F.when(F.col("_committed") == 1, "committed")
        .when(F.col("_ended") == 1, "ended_early")
        .when(F.col("_lost") == 1, "lost")
        .when(F.col("_dropped") == 1, "dropped")
        .otherwise("open")
    )
    stored = F.when(F.col("gap_mode") == "ok", F.col("_count") - F.col("lost")).otherwise(F.col("_count"))
    return summary.select(
        "batch_id", "stream", "started", "ended", outcome.alias("outcome"), "gap_mode",
        stored.cast("long").alias("messages"), "gaps", "lost", "errors", "min_flow", "max_flow",
    )


def abandoned_batches(events: DataFrame, window_minutes: int = 5, filled: bool = False) -> DataFrame:
    """One row per lost batch (the incident index), with the context events on the same stream within
    `window_minutes` either side counted: leader elections, stream updates, other abandonments, gaps."""
    events = _filled(events, filled)
    lost = with_abandonment_reason(losses(events)).alias("a")
    # Only these kinds count; the rest (progress reports, most of a busy log) would only swell the join.
    around = events.filter(F.col("kind").isin(CONTEXT, FAST_GAP, *ABANDONMENT_KINDS)).alias("c")
    near = (
        (F.col("c.stream") == F.col("a.stream"))
        & (F.col("c.time") >= F.col("a.time") - F.expr(f"INTERVAL {window_minutes} MINUTES"))
        & (F.col("c.time") <= F.col("a.time") + F.expr(f"INTERVAL {window_minutes} MINUTES"))
        & (F.col("c.event_id") != F.col("a.event_id"))
    )
    joined = lost.join(around, near, "left")

    def count(condition: Column) -> Column:
        return F.sum(F.when(condition, 1).otherwise(0)).cast("long")

    is_context = F.col("c.kind") == CONTEXT
    return joined.groupBy(
        "a.event_id", "a.time", "a.stream", "a.batch_id", "a.batch_kind", "a.reason", "a.account", "a.seq",
        F.coalesce(F.col("a.unverified"), F.lit(False)).alias("unverified"), "a.publisher", "a.domain",
    ).agg(
        count(is_context & F.col("c.detail").contains("leader_elected")).alias("leader_elections"),
        count(is_context & F.col("c.detail").startswith("stream_action") & (F.col("c.reason") == "modify")).alias("stream_updates"),
        count(F.col("c.kind").isin(*ABANDONMENT_KINDS)).alias("other_abandonments"),
        count(F.col("c.kind") == FAST_GAP).alias("gaps_nearby"),
    ).withColumnRenamed("batch_kind", "kind").withColumnRenamed("seq", "log_seq")


def capture_interruptions(events: DataFrame) -> DataFrame:
    """The blind windows the collector recorded: event_id, start, end, reason (the end is in `detail`)."""
    until = F.to_timestamp(F.regexp_replace(F.substring(F.col("detail"), len(UNTIL) + 1, 64), "Z$", "+00:00"))
    return (events.filter((F.col("kind") == EventKind.CAPTURE_INTERRUPTED.value) & F.col("detail").startswith(UNTIL))
            .select("event_id", F.col("time").alias("start"), until.alias("end"), "reason")
            .filter(F.col("end").isNotNull()))


def maintenances(events: DataFrame) -> DataFrame:
    """The maintenances that ended (the console's own record of each, console.domain.maintenance_record):
    event_id, start, end, action, nodes, actor, lost, unexpected, outcome. The record's JSON read as
    Spark reads JSON, totally: a field it lacks or cannot read is null, a row without its times left out."""
    def field(name: str, length: int = 256) -> Column:
        return F.substring(F.get_json_object(F.col("detail"), f"$.{name}"), 1, length)

    def count(name: str) -> Column:
        return F.get_json_object(F.col("detail"), f"$.{name}").cast("long")

    return (events.filter((F.col("kind") == MAINTENANCE) & (F.get_json_object(F.col("detail"), "$.phase") == "ended"))
            .select("event_id", F.to_timestamp(field("start", 40)).alias("start"), F.col("time").alias("end"),
                    F.substring(F.col("reason"), 1, 16).alias("action"),
                    F.array_join(F.from_json(field("nodes", 4096), "array<string>"), ", ").alias("nodes"),
                    field("actor").alias("actor"), count("lost").alias("lost"),
                    count("unexpected").alias("unexpected"), field("outcome", 1024).alias("outcome"))
            .filter(F.col("start").isNotNull() & (F.col("start") <= F.col("end"))))


def consumer_lag_hourly(events: DataFrame) -> DataFrame:
    """Each consumer's hour from the alerts part's lag records (console.domain.consumer_lag.lag_records): how
    many reads, the most pending, the longest and the mean lag in seconds, the reads that found it stalled.
    The JSON read as Spark reads JSON, totally: a record that does not read is no row, a field null."""
    rows = (events.filter(F.col("kind") == CONSUMER_LAG)
            .select(_hour(), F.explode(F.from_json(F.col("detail"), LAG_ROWS)).alias("r"))
            .filter(F.col("r.s").isNotNull() & F.col("r.c").isNotNull()))
    return (rows.groupBy("hour", F.substring("r.s", 1, 255).alias("stream"), F.substring("r.c", 1, 256).alias("consumer"))
            .agg(F.count(F.lit(1)).alias("reads"), F.max("r.p").alias("max_pending"),
                 F.max("r.l").alias("max_lag_seconds"), F.avg("r.l").alias("mean_lag_seconds"),
                 F.sum(F.when(F.col("r.st") == "stalled", 1).otherwise(0)).cast("long").alias("stalled_reads")))
