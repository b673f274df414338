"""Spark beyond local mode, from the installed pyspark's own launchers on loopback: a Spark Connect
server and a standalone master with one worker (shared by the deployment tests and bench/analytics.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyspark

from tests.processes import free_port

SPARK_HOME = Path(pyspark.__file__).parent


def _spark_env(tmp: Path) -> dict:
    """Daemons that log and keep pid files in `tmp` and run the venv's Python."""
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


@contextmanager
def connect_server(tmp: Path) -> Iterator[tuple[str, Path]]:
    """`start-connect-server.sh --wait` (in the foreground) on a free loopback port: (its sc:// URL, its log)."""
    port = free_port()
    proc, log = _start([str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]",
                        "--driver-memory", "1g", "--conf", "spark.ui.enabled=false",
                        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                        "--conf", f"spark.connect.grpc.binding.port={port}"], tmp, "connect")
    try:
        _wait(lambda: _listening(port), proc, log, "the Spark Connect server")
        yield f"sc://127.0.0.1:{port}", log
    finally:
        _stop(proc)


@contextmanager
def standalone_cluster(tmp: Path, worker_memory: str = "1g") -> Iterator[tuple[str, Path, subprocess.Popen]]:
    """A standalone master and one worker from `spark-class`, the worker registered: (the master's URL,
    the worker's work directory, the worker's process; its executors are its children)."""
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master, master_log = _start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                 "--port", str(port), "--webui-port", str(master_ui)], tmp, "master",
                                SPARK_DAEMON_MEMORY="256m")
    worker, worker_log = _start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                 "--cores", "2", "--memory", worker_memory, "--webui-port", str(worker_ui),
                                 "--work-dir", str(tmp / "work"), f"spark://127.0.0.1:{port}"], tmp, "worker",
                                SPARK_DAEMON_MEMORY="256m")

    def registered() -> bool:
        # The worker's own word first: the master's UI may have moved off the port picked for it (Spark takes
        # the next one when that is taken), and a loaded master answers its UI late (CI once waited 120 s)
        if "Successfully registered with master" in worker_log.read_text(errors="replace"):
            return True
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as reply:
                return json.load(reply).get("aliveworkers", 0) >= 1
        except (OSError, ValueError):
            return False

    try:
        _wait(registered, worker, worker_log, "the worker registered with the master")
        yield f"spark://127.0.0.1:{port}", tmp / "work", worker
    finally:
        _stop(worker)
        _stop(master)
