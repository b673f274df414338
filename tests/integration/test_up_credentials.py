"""`up --server` forwards credentials to every part: file flags as flags, secrets through the
environment, never on a command line or in a log."""

import re
import signal
import subprocess

from console.broker.server import EmbeddedServer
from tests.waits import poll_until

from tests.processes import CLI, free_port, wait_http

TOKEN = "s3cret-token-for-up"


def test_up_on_a_token_server_connects_every_part_and_never_shows_the_token(tmp_path):
    with EmbeddedServer(tmp_path / "nats", extra_config=f'authorization {{ token: "{TOKEN}" }}') as server:
        port = free_port()
        out = tmp_path / "up.out"
        up = subprocess.Popen([CLI, "up", "--server", server.url, "--token", TOKEN, "--data-dir", str(tmp_path / "data"),
                               "--port", str(port)], stdout=open(out, "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
        try:
            logs = tmp_path / "data" / "logs"
            collector_log = logs / "collector.log"
            poll_until(lambda: up.poll() is None and collector_log.exists() and "written" in collector_log.read_text(),
                       90, f"the collector never wrote to the event log:\n{out.read_text()}")
            wait_http(f"http://127.0.0.1:{port}/", up, out, timeout=90)  # it serves only once connected
            pids = [int(p) for p in re.findall(r"running \(pid (\d+)\)", out.read_text())]
            assert len(pids) == 4  # collector, web, analytics, alerts: no embedded server with --server
            for pid in pids:
                assert TOKEN not in open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
        finally:
            up.send_signal(signal.SIGINT)
            assert up.wait(timeout=60) == 0
        for log in [out, *logs.iterdir()]:
            assert TOKEN not in log.read_text(), log


PASSWORD = "pw-for-the-verbose-up-run"
WEB_PASSWORD = "web-pw-for-the-verbose-up-run"


def test_up_verbose_writes_no_secret_to_any_log_and_keeps_its_files_to_its_owner(tmp_path):
    """Under `up -v` every part logs at DEBUG (the analytics job's py4j echoes each Spark option): the
    NATS password, the web password and the event key reach no log and no output."""
    import stat

    with EmbeddedServer(tmp_path / "nats", extra_config=f'authorization {{ user: "u", password: "{PASSWORD}" }}') as server:
        data = tmp_path / "data"
        port = free_port()
        out = tmp_path / "up.out"
        up = subprocess.Popen([CLI, "-v", "up", "--server", server.url, "--user", "u", "--password", PASSWORD,
                               "--basic-auth", WEB_PASSWORD, "--data-dir", str(data), "--port", str(port),
                               "--analytics-every", "20"],  # a run with events in it soon, loss or not
                              stdout=open(out, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        try:
            analytics_log = data / "logs" / "analytics.log"
            poll_until(lambda: up.poll() is None and analytics_log.exists()
                       and re.search(r"analytics: events \d+\.\.\d+: [1-9]", analytics_log.read_text()),
                       180, lambda: f"analytics never read an event:\n{out.read_text()[-3000:]}")
        finally:
            up.send_signal(signal.SIGINT)
            assert up.wait(timeout=60) == 0
        key = (data / "event.key").read_text().strip()
        logs = sorted((data / "logs").glob("*.log"))
        assert {p.name for p in logs} >= {"collector.log", "web.log", "analytics.log", "alerts.log"}
        assert "DEBUG" in (data / "logs" / "analytics.log").read_text()  # verbose indeed
        for path in [out, *logs]:
            text = path.read_text()
            for secret in (PASSWORD, WEB_PASSWORD, key):
                assert secret not in text, f"{path.name} holds a secret"
        for path in logs:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(data.stat().st_mode) == 0o700 and stat.S_IMODE((data / "logs").stat().st_mode) == 0o700
