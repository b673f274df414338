"""What a new operator meets first: a start of `up` pages nobody, and a web process whose event key is
not the collector's says so on every page instead of showing an empty console."""

import http.client
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect

from console.alerting.rules_file import DEFAULT_RULES
from console.config import event_key, running_up
from tests.processes import CLI, Receiver, free_port, wait_http
from tests.soak import repeats
from tests.waits import poll_until


def _metrics_url(data: Path, pid: int) -> str | None:
    """Where this start of up serves /metrics (beside the web's port, or another if that one is taken)."""
    found = running_up(data)
    return found["metrics"] if found and found["pid"] == pid else None


def _metric(url: str | None, name: str) -> float | None:
    import urllib.request

    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            text = reply.read().decode()
    except (OSError, http.client.HTTPException):  # not listening yet, or another process on that port
        return None
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


@pytest.mark.timeout(900)  # ten whole `up` starts in a soak: past 300 s on a loaded 2-core machine
@pytest.mark.parametrize("starts", repeats(3, 10))
def test_starts_of_up_page_nobody(tmp_path, starts):
    receiver = Receiver()
    data = tmp_path / "data"
    data.mkdir()
    # Every shipped rule (collector silent among them) notifies the receiver.
    rules = DEFAULT_RULES.read_text().replace('severity = ', f'notify = ["webhook:{receiver.url}"]\nseverity = ')
    (data / "alert-rules.toml").write_text(rules)
    env = {**os.environ, "BATCH_CONSOLE_WEBHOOK_HOSTS": "127.0.0.1"}
    try:
        for start in range(starts):
            port, out = free_port(), tmp_path / f"up-{start}.out"
            nats_port = next(p for p in iter(free_port, None) if p != port)
            up = subprocess.Popen([CLI, "up", "--data-dir", str(data), "--port", str(port), "--nats-port",
                                   str(nats_port), "--without", "analytics"],  # the alerts part is what pages
                                  stdout=open(out, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                # The alerts part has heard the collector: from here on a start cannot page anyone.
                poll_until(lambda: up.poll() is None and _metric(_metrics_url(data, up.pid),
                                                                 "batch_console_collector_up") == 1.0, 90,
                           lambda: f"start {start}: the alerts never heard the collector\n{out.read_text()[-2000:]}")
                assert "nothing is sent" not in out.read_text()  # every rule here has a target
                assert "analytics: not started (--without)" in out.read_text()
                assert not (data / "logs" / "analytics.log").exists()
            finally:
                up.send_signal(signal.SIGINT)
                assert up.wait(timeout=60) == 0
    finally:
        receiver.server.shutdown()
    assert receiver.bodies == []


def test_a_web_process_with_another_key_than_the_collectors_says_so_on_every_page(tmp_path, page):
    from console.broker.server import EmbeddedServer

    collector_dir, web_dir = tmp_path / "collector", tmp_path / "web"
    event_key(data_dir=collector_dir)
    event_key(data_dir=web_dir)  # made by hand elsewhere: not the collector's
    with EmbeddedServer(tmp_path / "nats") as server:
        logs = [open(tmp_path / "collector.log", "w"), open(tmp_path / "web.log", "w")]
        collector = subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", str(collector_dir)],
                                     stdout=logs[0], stderr=subprocess.STDOUT)
        port = free_port()
        web = subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(web_dir)],
                               stdout=logs[1], stderr=subprocess.STDOUT)
        try:
            wait_http(f"http://127.0.0.1:{port}/", web, tmp_path / "web.log")
            for path in ("", "streams", "history"):
                page.goto(f"http://127.0.0.1:{port}/{path}")
                expect(page.get_by_text("EVENT KEY WRONG", exact=True)).to_be_visible(timeout=30_000)
                banner = page.get_by_role("alert").filter(has_text="event key wrong")
                expect(banner).to_contain_text(str(Path(web_dir / "event.key").resolve()))
        finally:
            for proc in (web, collector):
                proc.terminate()
                proc.wait(timeout=20)


def test_a_web_process_started_before_any_collector_says_no_key_then_follows_once_one_is_made(tmp_path, page):
    from console.broker.server import EmbeddedServer

    data = tmp_path / "data"
    with EmbeddedServer(tmp_path / "nats") as server:
        logs = [open(tmp_path / "web.log", "w"), open(tmp_path / "collector.log", "w")]
        port = free_port()
        web = subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(data)],
                               stdout=logs[0], stderr=subprocess.STDOUT)
        collector = None
        try:
            wait_http(f"http://127.0.0.1:{port}/", web, tmp_path / "web.log")  # up without a key: Streams works
            page.goto(f"http://127.0.0.1:{port}/")
            expect(page.get_by_text("EVENT KEY MISSING", exact=True)).to_be_visible(timeout=30_000)
            expect(page.get_by_role("alert").filter(has_text="no event key at")).to_contain_text(
                str((data / "event.key").resolve()))
            collector = subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", str(data)],
                                         stdout=logs[1], stderr=subprocess.STDOUT)
            expect(page.get_by_text("collector alive", exact=True).first).to_be_visible(timeout=60_000)
            expect(page.get_by_text("EVENT KEY MISSING", exact=True)).to_have_count(0)
        finally:
            for proc in (web, collector):
                if proc is not None:
                    proc.terminate()
                    proc.wait(timeout=20)
