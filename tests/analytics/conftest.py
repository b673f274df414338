"""One local Spark session for the analytics tests (2 cores, UI off, loopback only)."""

import os
import sys

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.config import EventLogSettings
from console.broker.fast import BatchEndedError, FastBatch
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.errors import BatchError
from tests.waits import events_for


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need the venv's pyarrow and console
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from console.analytics.source import JetStreamDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("batch-console-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.dataSource.register(JetStreamDataSource)
    yield session
    session.stop()


@pytest.fixture
async def client(server):
    nc = await nats.connect(server.url)
    await nc.jetstream().add_stream(StreamConfig(name="JOBA", subjects=["joba.>"], allow_atomic=True, allow_batched=True))
    yield nc
    await nc.close()


@pytest.fixture
def produce(server, client):
    """produce(atomic_ids, fast=[(gap mode, skipped)], key=None): real abandonments (gaps) and gapped
    fast batches, collected (signed with `key`); returns when all are in the log."""
    return lambda atomic_ids, fast=(), key=None: _produce(server, client, atomic_ids, fast, key)


async def _produce(server, client, atomic_ids, fast, key):
    conn = await nats.connect(server.url)
    collector = Collector(conn, CollectorSettings(batch_timeout=1.0, tick_every=0.1), EventLogSettings(key=key))
    await collector.start()
    for batch_id in atomic_ids:
        batch = AtomicBatch(client, batch_id=batch_id)
        await batch.add("joba.x", b"1")
        batch.skip_seq()
        with pytest.raises(BatchError):
            await batch.commit("joba.x", b"3")
    fast_ids = set()
    for mode, skip in fast:
        batch = FastBatch(client, flow=5, gap_mode=mode)
        fast_ids.add(batch.batch_id)
        try:
            for seq in range(1, 21):
                if seq == 10:
                    batch.skip_seq(skip)
                await batch.add("joba.f", b"x")
            await batch.commit_eob()
        except BatchEndedError:
            pass
    ends = ("fast_committed", "fast_ended_early")
    await events_for(client, set(atomic_ids) | fast_ids, lambda es: len({e.batch_id for e in es if e.kind.value in ("atomic_abandoned",) + ends}) == len(atomic_ids) + len(fast_ids))
    await collector.heartbeat()  # as a running collector's log always holds one (a wrong key shows by it)
    await collector.stop()
    await conn.close()
