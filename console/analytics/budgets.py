"""What the loss budgets count, per 5-minute bucket, stream and publisher: messages stored (the stream's
last sequence moved, from the collector's stream totals), messages stored by fast batches (their
PubAck's count), messages lost (gaps, refusals, and every message of a lost atomic batch), batches seen (fast starts; atomic batches the publish
side saw open) and batches lost (the losses that stand). console.domain.budgets sums these over an
objective's windows.

A total is cumulative (a last sequence, a count since the collector started), so a bucket gets what it
grew by since the sample before; one that went down (a stream made again, a collector restarted)
starts again from its new value. A count the collector keeps since its start (the atomic batches) grew
by its whole value at its first sample. An atomic loss on a stream whose atomic batches nobody counted is
`atomic_uncounted`: that objective's batch rate cannot be known."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from console.analytics.transforms import ABANDONMENT_KINDS, ATOMIC_LOSSES, FAST_ERROR, FAST_GAP, losses
from console.domain.events import FAST_ENDS, EventKind

BUCKET_SECONDS = 300
TOTALS = EventKind.STREAM_TOTALS.value
FAST_STARTED = EventKind.FAST_STARTED.value
FAST_END_KINDS = tuple(kind.value for kind in FAST_ENDS)
TOTALS_JSON = ("struct<instance:string, last_seq:map<string,bigint>, atomic:map<string,bigint>, "
               "atomic_publishers:map<string,map<string,array<bigint>>>>")
KEPT = EventKind.BATCH_MESSAGES.value
ATOMIC_LOST = EventKind.ATOMIC_LOST.value
COUNTS = ("stored", "fast_stored", "lost_messages", "batches", "lost_batches", "atomic_uncounted", "atomic_batches",
          "atomic_stored", "publisher_uncounted", "atomic_unsized")
MAX_BATCH_MESSAGES = 1_000_000  # a count past this in the log is not a batch's: left uncounted


def bucket(col: str = "time") -> Column:
    seconds = F.floor(F.unix_timestamp(F.col(col)) / BUCKET_SECONDS) * BUCKET_SECONDS
    return F.timestamp_seconds(seconds).alias("bucket")


def publisher_key() -> Column:
    """The publisher as objectives name it: the connection's name and its client, "order-svc (python 2.7)"
    (the line's part before its first ", "); "" when not known."""
    return F.coalesce(F.substring_index(F.col("publisher"), ", ", 1), F.lit("")).alias("publisher")


def _grown(samples: DataFrame, by: list[str], from_zero: bool = False) -> DataFrame:
    """Each sample's growth since the one before it of the same `by`: its value when it went down
    (counted again from zero); for the first one seen, nothing (a last sequence: a baseline), or its
    value when the count started from zero with its collector (`from_zero`: counts since a start)."""
    before = F.lag("value").over(Window.partitionBy(*by).orderBy("time"))
    grown = F.when(before.isNull(), F.col("value") if from_zero else F.lit(0)) \
        .when(F.col("value") < before, F.col("value")).otherwise(F.col("value") - before)
    return samples.withColumn("grown", grown)


def budget_counts(events: DataFrame) -> DataFrame:
    """bucket, stream, publisher and the COUNTS, from events whose fast batches' streams are filled."""
    totals = events.filter(F.col("kind") == TOTALS).withColumn("t", F.from_json("detail", TOTALS_JSON))
    stored = _grown(totals.select("time", F.explode("t.last_seq").alias("stream", "value")), ["stream"]) \
        .select(bucket(), "stream", F.lit("").alias("publisher"), F.col("grown").alias("stored"))
    atomic_samples = totals.select("time", F.col("t.instance").alias("instance"),
                                   F.explode("t.atomic").alias("stream", "value"))
    atomic = _grown(atomic_samples, ["instance", "stream"], from_zero=True) \
        .select(bucket(), "stream", F.lit("").alias("publisher"), F.col("grown").alias("batches"))
    counted = atomic_samples.select("stream").distinct()
    by_publisher = totals.select("time", F.col("t.instance").alias("instance"),
                                 F.explode("t.atomic_publishers").alias("stream", "publishers")) \
        .select("time", "instance", "stream", F.explode("publishers").alias("publisher", "counts"))
    atomic_by = [_grown(by_publisher.withColumn("value", F.col("counts")[i]), ["instance", "stream", "publisher"],
                        from_zero=True)
                 .select(bucket(), "stream", "publisher", F.col("grown").alias(name))
                 for i, name in enumerate(("atomic_batches", "atomic_stored"))]
    counted_by = by_publisher.filter(F.col("publisher") != "").select("stream", "publisher").distinct()

    keyed = events.select("*", bucket(), publisher_key().alias("publisher_key")).drop("publisher") \
        .withColumnRenamed("publisher_key", "publisher")
    kind = F.col("kind")

    def total(condition: Column, value: Column, name: str) -> Column:
        return F.sum(F.when(condition, value).otherwise(0)).cast("long").alias(name)

    seen = keyed.groupBy("bucket", "stream", "publisher").agg(
        total(kind.isin(*FAST_END_KINDS), F.coalesce(F.col("count"), F.lit(0)), "fast_stored"),
        total(kind.isin(FAST_GAP, FAST_ERROR), F.coalesce(F.col("lost"), F.lit(0)), "lost_messages"),
        total(kind == FAST_STARTED, F.lit(1), "batches"),
    )
    standing = losses(keyed.filter(kind.isin(*ABANDONMENT_KINDS, EventKind.LOSS_RETRACTED.value)))
    atomic_loss = F.col("kind").isin(*ATOMIC_LOSSES)
    lost = standing.join(counted.withColumn("_counted", F.lit(True)), "stream", "left") \
        .join(counted_by.withColumn("_counted_by", F.lit(True)), ["stream", "publisher"], "left").groupBy(
        "bucket", "stream", "publisher").agg(
        F.countDistinct("batch_id").cast("long").alias("lost_batches"),
        total(atomic_loss & F.col("_counted").isNull(), F.lit(1), "atomic_uncounted"),
        total(atomic_loss & F.col("_counted_by").isNull(), F.lit(1), "publisher_uncounted"))
    parts = [stored, atomic, *atomic_by, seen, lost, _atomic_messages_lost(events, standing.filter(atomic_loss))]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part, allowMissingColumns=True)
    return union.groupBy("bucket", "stream", "publisher").agg(
        *[F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c) for c in COUNTS])


def _atomic_messages_lost(events: DataFrame, atomic_losses: DataFrame) -> DataFrame:
    """An atomic batch lost stores none of its messages: each counts as lost, as many as the publish side
    saw it send (its kept messages' highest sequence, or the sequence an ATOMIC_LOST names). A loss whose
    messages nobody counted (the publish side not tapped) is `atomic_unsized`: its objective's message
    rate cannot be known."""
    seq = F.col("batch_seq")  # the event's own `seq` (the table's `seq` is the log's)
    sized = events.filter(F.col("kind") == KEPT).filter(seq.between(1, MAX_BATCH_MESSAGES)) \
        .groupBy("batch_id").agg(F.max(seq).alias("_kept"))
    own = F.when((F.col("kind") == ATOMIC_LOST) & seq.between(1, MAX_BATCH_MESSAGES), seq)
    per_batch = atomic_losses.join(sized, "batch_id", "left").groupBy("bucket", "stream", "publisher", "batch_id") \
        .agg(F.max(F.coalesce(F.col("_kept"), own)).alias("_sent"))
    return per_batch.groupBy("bucket", "stream", "publisher").agg(
        F.coalesce(F.sum("_sent"), F.lit(0)).cast("long").alias("lost_messages"),
        F.sum(F.when(F.col("_sent").isNull(), 1).otherwise(0)).cast("long").alias("atomic_unsized"))
