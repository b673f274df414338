"""Hostile input against running processes: `collect`, `serve` and an `analytics --once` run.

An ordinary client of the same account publishes every input that once blinded the console; real
losses made after it must still reach the event log, the Live page and SQLite, and the status
must count what was refused.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from console.broker.server import BatchLimits, EmbeddedServer
from console.config import event_key
from tests.waits import poll_until

from tests.processes import CLI, free_port, wait_collecting, wait_http

CLIENT = str(Path(__file__).with_name("hostile_client.py"))


def client(url: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, CLIENT, url, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


class Console:
    """A server with a 1 s batch timeout, a collector and the web app on one data directory."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.server = EmbeddedServer(tmp / "nats", batch_limits=BatchLimits(timeout=1.0))
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        self.url = self.server.start().url
        event_key(data_dir=self.tmp)  # made before the parts start, as `up` would find it
        self.restart_collector()
        port = free_port()
        self.web = self._start(["serve", "--server", self.url, "--port", str(port), "--data-dir", str(self.tmp)], "web")
        self.web_url = f"http://127.0.0.1:{port}/"
        wait_http(self.web_url, self.web, self.tmp / "web.log")

    def _start(self, args: list[str], name: str) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "a") as log:
            self.procs.append(subprocess.Popen([CLI, *args], stdout=log, stderr=subprocess.STDOUT))
        return self.procs[-1]

    def restart_collector(self) -> None:
        self.starts = getattr(self, "starts", 0) + 1
        self.collector = self._start(["collect", "--server", self.url, "--data-dir", str(self.tmp)], "collector")
        wait_collecting(self.collector, self.tmp / "collector.log", self.starts)

    def stop_collector(self) -> None:
        self.collector.send_signal(signal.SIGTERM)
        assert self.collector.wait(timeout=30) == 0

    def events_of(self, batch_id: str) -> list[str]:
        return json.loads(client(self.url, "events", str(self.tmp / "event.key"), batch_id))

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        self.server.stop()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    console = Console(tmp_path_factory.mktemp("hostile"))
    try:
        console.start()
        yield console
    finally:
        console.close()


def rejected_on_live(page) -> int:
    status = page.get_by_text(re.compile(r"inputs rejected \d+"))
    return int(re.search(r"inputs rejected (\d+)", status.inner_text()).group(1))


def test_after_every_hostile_input_real_losses_reach_the_log_live_and_sqlite(hostile, page):
    page.goto(hostile.web_url)
    expect(page.get_by_text("collector alive", exact=True)).to_be_visible(timeout=30_000)
    sent = json.loads(client(hostile.url, "inputs"))
    client(hostile.url, "flood-advisories")
    real = json.loads(client(hostile.url, "real"))

    for batch_id in real.values():  # on Live, though a flood of 600 losses of FLOOD came first
        expect(page.get_by_role("row").filter(has_text=batch_id)).to_be_visible(timeout=30_000)
    poll_until(lambda: rejected_on_live(page) >= sent["malformed"], 30, "the status does not count the rejected inputs")
    expect(page.get_by_text(re.compile(r"event-log records skipped \d+"))).to_be_visible(timeout=30_000)
    expect(page.get_by_text("collector alive", exact=True)).to_be_visible()
    assert hostile.collector.poll() is None
    assert "fast_gap" in hostile.events_of(real["fast"]) and "atomic_abandoned" in hostile.events_of(real["atomic"])

    job = subprocess.run([CLI, "analytics", "--once", "--server", hostile.url, "--data-dir", str(hostile.tmp)],
                         capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr[-3000:]
    assert re.search(r"\d+ skipped \(.*forged: unsigned \d+", job.stdout), job.stdout
    with sqlite3.connect(hostile.tmp / "console.db") as db:
        stored = {row[0] for row in db.execute("SELECT batch_id FROM abandoned_batches")}
    assert set(real.values()) <= stored


def test_a_flood_of_forged_acks_loses_nothing_of_a_real_fast_batch(hostile):
    flood = subprocess.Popen([sys.executable, CLIENT, hostile.url, "flood-acks", "30000"])
    real = json.loads(client(hostile.url, "real"))
    assert flood.wait(timeout=120) == 0
    poll_until(lambda: {"fast_started", "fast_gap", "fast_ended_early"} <= set(hostile.events_of(real["fast"])), 60,
               "the real fast batch's start, gap and end are not all in the log")


def test_a_poisoned_advisory_pending_at_restart_does_not_stop_the_collector(hostile, page):
    page.goto(hostile.web_url)
    hostile.stop_collector()
    client(hostile.url, "poison")  # waits in the advisory stream for the next collector
    forged = subprocess.Popen([sys.executable, CLIENT, hostile.url, "forged-status"])
    try:
        expect(page.get_by_text("collector silent", exact=True)).to_be_visible(timeout=60_000)  # forged statuses do not count
    finally:
        forged.wait(timeout=60)
    hostile.restart_collector()
    real = json.loads(client(hostile.url, "real"))
    expect(page.get_by_role("row").filter(has_text=real["atomic"])).to_be_visible(timeout=60_000)
    expect(page.get_by_text("collector alive", exact=True)).to_be_visible(timeout=30_000)
    assert hostile.collector.poll() is None
