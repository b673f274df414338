"""The job on Spark beyond local mode: a Spark Connect server (`--remote`) and a standalone master
with a worker (`--spark-master`), each started from the installed pyspark's own launchers on
loopback, with the job as the console's own command in a process of its own."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlmodel import Session, select

from console.broker.eventlog import EventLog
from console.config import EventLogSettings, event_key
from console.domain.events import BatchEvent, EventKind
from console.storage import sqlite
from console.storage.tables import AbandonedBatch
from tests import spark_cluster
from tests.processes import CLI


@pytest.fixture
def connect_server(tmp_path):
    with spark_cluster.connect_server(tmp_path) as server:
        yield server


@pytest.fixture
def standalone_master(tmp_path):
    with spark_cluster.standalone_cluster(tmp_path) as (master, work_dir, _):
        yield master, work_dir


async def _analytics_once(server, data_dir: Path, *where: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run, [CLI, "analytics", "--once", "--server", server.url, "--data-dir", str(data_dir), *where],
        capture_output=True, text=True, timeout=300, env={**os.environ, "BATCH_CONSOLE_DRIVER_MEMORY": "1g"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    [line] = [text for text in done.stdout.splitlines() if text.startswith("analytics:")]
    return line


async def _abandonment_through_the_job(server, client, data_dir: Path, batch_id: str, *where: str) -> AbandonedBatch:
    """A signed abandonment in the event log, `analytics --once` run `where`: its row in History."""
    log = EventLog(client.jetstream(), EventLogSettings(key=event_key(data_dir=data_dir)))
    await log.ensure()
    await log.append([BatchEvent(f"run-{batch_id}", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA",
                                 batch_id, reason="timeout")])
    line = await _analytics_once(server, data_dir, *where)
    assert " 1 read" in line, line
    with Session(sqlite.open_db(data_dir / "console.db")) as session:
        row = session.exec(select(AbandonedBatch).where(AbandonedBatch.batch_id == batch_id)).first()
    assert row is not None, f"{batch_id} not in History"
    return row


async def test_the_job_runs_on_a_spark_connect_server(server, client, connect_server, tmp_path):
    url, server_log = connect_server
    row = await _abandonment_through_the_job(server, client, tmp_path / "data", "over-connect", "--remote", url,
                                             "--driver-reads-up-to", "0")  # the event log read on the server too
    assert row.stream == "JOBA" and row.reason == "timeout"
    assert re.search(r"Got job \d+ \(Spark Connect - session_id", server_log.read_text())


async def test_the_job_runs_on_a_standalone_master_and_worker(server, client, standalone_master, tmp_path):
    master, work_dir = standalone_master
    await _abandonment_through_the_job(server, client, tmp_path / "data", "over-standalone", "--spark-master", master,
                                       "--driver-reads-up-to", "0")
    # The worker, not the driver, ran the tasks: it made an executor directory for the application.
    assert any(work_dir.glob("app-*/*/stderr")), "no executor ran on the worker"


async def test_master_and_remote_together_are_refused(tmp_path):
    done = await asyncio.to_thread(
        subprocess.run, [CLI, "analytics", "--once", "--data-dir", str(tmp_path), "--spark-master", "local[1]",
                         "--remote", "sc://127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not both" in done.stderr
