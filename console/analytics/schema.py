"""The event log as a Spark table: one explicit schema, the stream sequence first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from console.domain.events import BatchEvent

EVENT_SCHEMA = StructType([
    StructField("seq", LongType(), False),  # the event's sequence in the event log stream
    StructField("event_id", StringType(), False),
    StructField("kind", StringType(), False),
    StructField("time", TimestampType(), False),
    StructField("stream", StringType(), True),
    StructField("batch_id", StringType(), True),
    StructField("reason", StringType(), True),
    StructField("gap_mode", StringType(), True),
    StructField("flow", IntegerType(), True),
    StructField("previous_flow", IntegerType(), True),
    StructField("batch_seq", LongType(), True),  # the event's `seq`: a sequence inside the batch
    StructField("first_lost_seq", LongType(), True),
    StructField("lost", LongType(), True),
    StructField("acks", LongType(), True),
    StructField("err_code", IntegerType(), True),
    StructField("description", StringType(), True),
    StructField("count", LongType(), True),
    StructField("stream_seq", LongType(), True),
    StructField("eob", BooleanType(), True),
    StructField("inferred", BooleanType(), False),
    StructField("account", StringType(), True),
    StructField("domain", StringType(), True),
    StructField("detail", StringType(), True),
    StructField("source", StringType(), True),
    StructField("unverified", BooleanType(), True),  # null in files written before it existed
    StructField("publisher", StringType(), True),  # the publishing connection in one line (null before it existed)
    StructField("probable_stream", StringType(), True),
    StructField("v", IntegerType(), False),
])


def to_row(seq: int, e: BatchEvent) -> tuple[Any, ...]:
    """A tuple in EVENT_SCHEMA's order."""
    return (
        seq, e.event_id, e.kind.value, e.time, e.stream, e.batch_id, e.reason, e.gap_mode, e.flow,
        e.previous_flow, e.seq, e.first_lost_seq, e.lost, e.acks, e.err_code, e.description, e.count,
        e.stream_seq, e.eob, e.inferred, e.account, e.domain, e.detail, e.source, e.unverified,
        e.publisher.line() if e.publisher else None, e.probable_stream, e.v,
    )


SKIPPED_KIND = "_skipped"  # a record of the log that is not a console event: counted by the job, never stored


def skipped_row(seq: int, reason: str, stored: datetime) -> tuple[Any, ...]:
    """A marker in EVENT_SCHEMA's order for a record the source could not read, with the reason."""
    return (seq, f"{SKIPPED_KIND}.{seq}", SKIPPED_KIND, stored, None, None, reason[:200], *([None] * 12), False,
            None, None, None, None, False, None, None, 0)
