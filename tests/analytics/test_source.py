from datetime import datetime, timedelta, timezone

import pytest

from console.analytics.source import SeqRange, SourceOptions, split
from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.events import BatchEvent, EventKind

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=timezone.utc)


def test_split_covers_the_range_without_overlap():
    assert split(1, 10, 3) == [SeqRange(1, 4), SeqRange(5, 8), SeqRange(9, 10)]
    assert split(5, 5, 4) == [SeqRange(5, 5)]
    assert split(6, 5, 2) == []


@pytest.fixture
async def event_log(nc):
    log = EventLog(nc.jetstream(), EventLogSettings(stream="SPARK_SRC", subject_prefix="spark_src"))
    await log.ensure()
    events = [
        BatchEvent(f"e{i}", EventKind.ATOMIC_ABANDONED if i % 3 == 0 else EventKind.FAST_GAP,
                   T0 + timedelta(minutes=i), "S", f"b{i}", reason="timeout" if i % 3 == 0 else None, seq=i, lost=i)
        for i in range(1, 31)
    ]
    await log.append(events)
    return log


def read(spark, url, **options):
    reader = spark.read.format("jetstream").option("servers", url).option("stream", "SPARK_SRC").option("subject_prefix", "spark_src")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


async def test_batch_read_of_a_range_in_parallel_partitions(spark, nats_server, event_log):
    df = read(spark, nats_server.url, start_seq=5, end_seq=24, partitions=3)
    rows = df.orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(5, 25))
    assert rows[0].event_id == "e5" and rows[0].time == datetime(2026, 11, 21, 3, 5)
    assert df.rdd.getNumPartitions() == 3


async def test_subject_filter_reads_one_kind(spark, nats_server, event_log):
    df = read(spark, nats_server.url, subject_filter="atomic_abandoned.*", partitions=2)
    assert sorted(r.batch_id for r in df.collect()) == sorted(f"b{i}" for i in range(3, 31, 3))


async def test_an_unreachable_server_fails_the_read_with_a_clear_message(spark):
    with pytest.raises(Exception, match="cannot reach NATS at nats://127.0.0.1:1"):
        read(spark, "nats://127.0.0.1:1", connect_timeout=1).collect()


async def test_streaming_offsets_are_stream_sequences_and_resume_from_the_checkpoint(spark, nats_server, event_log, tmp_path):
    seen = []

    def run_once():
        stream = (spark.readStream.format("jetstream").option("servers", nats_server.url)
                  .option("stream", "SPARK_SRC").option("subject_prefix", "spark_src").load())
        query = (stream.writeStream.foreachBatch(lambda df, _: seen.extend(r.seq for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()

    run_once()
    assert sorted(seen) == list(range(1, 31))
    await event_log.append([BatchEvent("late", EventKind.FAST_GAP, T0, "S", "late", lost=1)])
    seen.clear()
    run_once()
    assert seen == [31]


@pytest.mark.cluster
async def test_the_job_reads_an_r3_event_log_through_another_node_when_one_is_down(spark, cluster, tmp_path):
    import asyncio

    import nats

    from console.analytics.job import JobSettings, run_once
    from tests.waits import eventually

    key = b"k" * 32
    nc = await nats.connect(cluster.urls[1:])
    log = EventLog(nc.jetstream(), EventLogSettings(key=key))
    await eventually(log.ensure, lambda _: True, timeout=30, what="the event log")
    assert (await nc.jetstream().stream_info("BATCH_CONSOLE_EVENTS")).config.num_replicas == 3
    await log.append([BatchEvent(f"cl{i}", EventKind.ATOMIC_ABANDONED, T0 + timedelta(minutes=i), "S", f"cl-b{i}",
                                 reason="timeout") for i in range(3)])
    cluster.kill(0)
    try:
        await eventually(lambda: nc.jetstream().stream_info("BATCH_CONSOLE_EVENTS"),
                         lambda info: info.cluster.leader not in (None, "n1"), timeout=30, what="a leader on n2 or n3")
        # consumers are made through the meta leader: the reads wait for one on a live node too
        await eventually(lambda: asyncio.to_thread(cluster.meta_leader), lambda leader: leader not in (None, "n1"),
                         timeout=30, what="a meta leader on n2 or n3")
        source = SourceOptions.parse({"servers": cluster.url, "event_secret": key.decode()})  # n1 first in the list, and down
        report = await asyncio.to_thread(run_once, lambda: spark, JobSettings(tmp_path, source=source))
        assert report.events_read == 3 and not report.skipped
    finally:
        cluster.restart(0)
        cluster.wait_for_meta_leader()
        await nc.close()


def test_the_job_options_go_to_spark_and_back_unchanged():
    options = SourceOptions(stream="S", prefix="p.q", subject_filter="atomic_abandoned.>", start_seq=7, end_seq=9,
                            partitions=3, idle_timeout=1.5, event_key=b"k" * 32, key_source="--event-key-file f")
    assert SourceOptions.parse(options.to_options()) == options
    assert all(isinstance(v, str) for v in options.to_options().values())  # Spark's options are text
    assert "k" * 32 not in repr(options)
