"""The analytics job end to end: real batches -> collector -> event log -> Spark -> SQLite and Delta."""

import asyncio

import nats
import pytest
from deltalake import DeltaTable
from nats.js.api import StreamConfig
from sqlmodel import Session, select

from console.analytics.job import JobSettings, run_once
from console.broker.atomic import AtomicBatch
from console.broker.fast import BatchEndedError, FastBatch
from console.broker.server import EmbeddedServer
from console.broker.eventlog import EventLogSettings
from console.collector.collector import Collector, CollectorSettings
from console.errors import BatchError
from console.storage import sqlite
from console.storage.tables import AbandonedBatch, AbandonmentHourly, FastBatchSummary, GapHourly
from tests.conftest import TEST_LIMITS
from tests.integration.test_collector import events_for


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with EmbeddedServer(tmp_path_factory.mktemp("job"), batch_limits=TEST_LIMITS) as s:
        yield s


@pytest.fixture
async def client(server):
    nc = await nats.connect(server.url)
    await nc.jetstream().add_stream(StreamConfig(name="JOBA", subjects=["joba.>"], allow_atomic=True, allow_batched=True))
    yield nc
    await nc.close()


async def produce(server, client, atomic_ids, fast=(), key: bytes | None = None):
    """Real abandonments (gaps) and gapped fast batches, collected (signed with `key`); returns when
    all are in the log."""
    conn = await nats.connect(server.url)
    collector = Collector(conn, CollectorSettings(batch_timeout=1.0, tick_every=0.1,
                                                  event_log=EventLogSettings(key=key)))
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
    await collector.stop()
    await conn.close()


def totals(engine):
    with Session(engine) as s:
        hourly = s.exec(select(AbandonmentHourly)).all()
        return {
            "atomic": sum(r.batches for r in hourly if r.kind == "atomic"),
            "fast": sum(r.batches for r in hourly if r.kind == "fast"),
            "gaps": sum(r.gaps for r in s.exec(select(GapHourly)).all()),
            "lost": sum(r.lost for r in s.exec(select(GapHourly)).all()),
            "batches": sorted(r.outcome for r in s.exec(select(FastBatchSummary)).all()),
            "abandoned": len(s.exec(select(AbandonedBatch)).all()),
        }


def delta_totals(settings):
    hourly = DeltaTable(str(settings.delta("abandonment_hourly"))).to_pyarrow_table().to_pylist()
    events = DeltaTable(str(settings.delta("events"))).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    return {
        "atomic": sum(r["batches"] for r in hourly if r["kind"] == "atomic"),
        "fast": sum(r["batches"] for r in hourly if r["kind"] == "fast"),
        "events": len(events),
        "distinct_events": len(set(events)),
    }


async def test_job_keeps_history_exactly_once(spark, server, client, tmp_path, monkeypatch):
    settings = JobSettings(tmp_path, source={"servers": server.url, "partitions": "2"})
    engine = sqlite.open_db(settings.db_path)

    await produce(server, client, ["j1", "j2", "j3"], fast=[("ok", 2), ("fail", 1)])
    first = await asyncio.to_thread(run_once, spark, settings)
    assert first.events_read > 0
    assert totals(engine) == {"atomic": 3, "fast": 1, "gaps": 2, "lost": 3,
                              "batches": ["committed", "ended_early"], "abandoned": 4}
    assert delta_totals(settings)["atomic"] == 3

    unchanged = await asyncio.to_thread(run_once, spark, settings)  # nothing new: nothing changes
    assert unchanged.events_read == 0 and totals(engine)["atomic"] == 3

    await produce(server, client, ["j4", "j5"])
    second = await asyncio.to_thread(run_once, spark, settings)
    assert second.first_seq == first.last_seq + 1
    assert totals(engine)["atomic"] == 5 and totals(engine)["abandoned"] == 6

    await produce(server, client, ["j6"])

    def crash(*args, **kwargs):  # killed after the Delta writes, before the offset is recorded
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(sqlite, "commit_run", crash)
    with pytest.raises(KeyboardInterrupt):
        await asyncio.to_thread(run_once, spark, settings)
    assert delta_totals(settings)["atomic"] == 6 and totals(engine)["atomic"] == 5
    monkeypatch.undo()

    await asyncio.to_thread(run_once, spark, settings)
    assert totals(engine)["atomic"] == 6 and totals(engine)["abandoned"] == 7
    after = delta_totals(settings)
    assert after["atomic"] == 6 and after["events"] == after["distinct_events"]


async def test_analytics_cli_runs_once_and_prints_its_progress_line(server, client, tmp_path):
    import subprocess
    import sys
    from datetime import datetime, timezone
    from pathlib import Path

    from console.broker.eventlog import EventLog, EventLogSettings
    from console.config import event_key
    from console.domain.events import BatchEvent, EventKind

    unsigned = EventLog(client.jetstream())
    await unsigned.ensure()
    await unsigned.append([BatchEvent("forged-run", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA",
                                      "forged", reason="timeout")])
    signed = EventLog(client.jetstream(), EventLogSettings(key=event_key(data_dir=tmp_path)))  # the CLI's key
    await signed.append([BatchEvent("cli-run", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA", "cli",
                                    reason="timeout")])
    in_log = await signed.last_seq()
    cli = str(Path(sys.executable).parent / "batch-console")
    done = await asyncio.to_thread(
        subprocess.run, [cli, "analytics", "--server", server.url, "--data-dir", str(tmp_path), "--once"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = [l for l in done.stdout.splitlines() if l.startswith("analytics:")]
    forged = in_log - 1  # every earlier event of this module came from a collector without the key
    assert line.startswith(f"analytics: events 1..{in_log}: 1 read, {forged} skipped (forged: unsigned {forged}), ")
    assert (tmp_path / "console.db").exists() and (tmp_path / "delta" / "events").is_dir()


def test_a_run_before_any_collector_says_so(spark, tmp_path):
    with EmbeddedServer(tmp_path / "empty") as empty:
        report = run_once(spark, JobSettings(tmp_path / "data", source={"servers": empty.url}))
    assert report.events_read == 0 and report.line().startswith("no event log BATCH_CONSOLE_EVENTS yet")
