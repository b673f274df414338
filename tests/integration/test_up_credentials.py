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
