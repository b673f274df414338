"""The job on Spark beyond local mode: a Spark Connect server (`--remote`) and a standalone master
with a worker (`--spark-master`), each started from the installed pyspark's own launchers on
loopback, with the job as the console's own command in a process of its own."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pyspark
import pytest
from sqlmodel import Session, select

from console.broker.eventlog import EventLog
from console.config import EventLogSettings, event_key
from console.domain.events import BatchEvent, EventKind
from console.storage import sqlite
from console.storage.tables import AbandonedBatch
from tests.processes import CLI, free_port

SPARK_HOME = Path(pyspark.__file__).parent


def _spark_env(tmp: Path) -> dict:
    """Daemons that log and keep pid files in the test's directory and run the venv's Python."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(tmp / "logs"),
            "SPARK_PID_DIR": str(tmp), "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _start(args: list[str], tmp: Path, name: str, **env: str) -> tuple[subprocess.Popen, Path]:
    log = tmp / f"{name}.log"
    proc = subprocess.Popen(args, env={**_spark_env(tmp), **env}, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, log


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)


def _wait(condition, proc: subprocess.Popen, log: Path, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"{what}: the process exited\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} not in time\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def connect_server(tmp_path):
    """`start-connect-server.sh --wait` (in the foreground) on a free loopback port."""
    port = free_port()
    proc, log = _start([str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]",
                        "--driver-memory", "1g", "--conf", "spark.ui.enabled=false",
                        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                        "--conf", f"spark.connect.grpc.binding.port={port}"], tmp_path, "connect")
    try:
        _wait(lambda: _listening(port), proc, log, "the Spark Connect server")
        yield f"sc://127.0.0.1:{port}", log
    finally:
        _stop(proc)


@pytest.fixture
def standalone_master(tmp_path):
    """A standalone master and one worker from pyspark's `spark-class`, the worker registered."""
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master, master_log = _start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                 "--port", str(port), "--webui-port", str(master_ui)], tmp_path, "master",
                                 SPARK_DAEMON_MEMORY="256m")
    worker, worker_log = _start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                 "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui),
                                 "--work-dir", str(tmp_path / "work"), f"spark://127.0.0.1:{port}"], tmp_path, "worker",
                                 SPARK_DAEMON_MEMORY="256m")

    def registered() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as reply:
                return json.load(reply).get("aliveworkers", 0) >= 1
        except OSError:
            return False

    try:
        _wait(registered, worker, worker_log, "the worker registered with the master")
        yield f"spark://127.0.0.1:{port}", tmp_path / "work"
    finally:
        _stop(worker)
        _stop(master)


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
    row = await _abandonment_through_the_job(server, client, tmp_path / "data", "over-connect", "--remote", url)
    assert row.stream == "JOBA" and row.reason == "timeout"
    assert "Got job 0 (Spark Connect - session_id" in server_log.read_text()  # the server ran the job


async def test_the_job_runs_on_a_standalone_master_and_worker(server, client, standalone_master, tmp_path):
    master, work_dir = standalone_master
    await _abandonment_through_the_job(server, client, tmp_path / "data", "over-standalone", "--spark-master", master)
    # The worker, not the driver, ran the tasks: it made an executor directory for the application.
    assert any(work_dir.glob("app-*/*/stderr")), "no executor ran on the worker"


async def test_master_and_remote_together_are_refused(tmp_path):
    done = await asyncio.to_thread(
        subprocess.run, [CLI, "analytics", "--once", "--data-dir", str(tmp_path), "--spark-master", "local[1]",
                         "--remote", "sc://127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not both" in done.stderr
