"""The NATS connection drops and returns under the web process; the open page follows."""

import re
import signal
import subprocess

from playwright.sync_api import expect

from tests.processes import CLI, free_port, probe, wait_http
from tests.waits import poll_until


def start(args, log_path):
    log = open(log_path, "a")
    return subprocess.Popen([CLI, *args], stdout=log, stderr=subprocess.STDOUT)


def nats_ready(log_path, proc, after=0):
    def ready():
        assert proc.poll() is None, log_path.read_text()[after:]
        return re.search(r"nats-server ready on (nats://[\d.]+:\d+)", log_path.read_text()[after:])

    return poll_until(ready, 30, "the nats-server did not say it was ready", every=0.05).group(1)


def test_the_page_shows_the_drop_and_follows_events_after_the_server_returns(tmp_path, page):
    port = free_port()
    nats_log = tmp_path / "nats.log"
    server_args = ["server", "--port", str(port), "--data-dir", str(tmp_path), "--batch-timeout", "1"]
    server = start(server_args, nats_log)
    url = nats_ready(nats_log, server)
    procs = [start(["collect", "--server", url, "--data-dir", str(tmp_path)], tmp_path / "collector.log")]
    web_port = free_port()
    procs.append(start(["serve", "--server", url, "--port", str(web_port), "--data-dir", str(tmp_path)], tmp_path / "web.log"))
    try:
        wait_http(f"http://127.0.0.1:{web_port}/", procs[-1], tmp_path / "web.log")
        page.goto(f"http://127.0.0.1:{web_port}/")
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)

        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
        expect(page.get_by_text("NATS reconnecting", exact=True)).to_be_visible(timeout=30_000)

        offset = len(nats_log.read_text())
        server = start(server_args, nats_log)  # same port, same store
        nats_ready(nats_log, server, offset)
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
        report = probe(url, "atomic", "--count", "2", "--batch-size", "2", "--abandon",
                       "--stream", "UI_BACK", "--subject", "ui.back")
        expect(page.get_by_text(report["abandoned_batch"])).to_be_visible(timeout=30_000)
    finally:
        for proc in procs + [server]:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)


def test_a_link_with_a_name_past_the_control_line_blinds_nobody(tmp_path, page):
    """/stream?name=<5,000 characters> (and the same length in Replay's names) are refused before they
    reach a subject: the web process keeps its connection, and a real abandonment shows on Live."""
    port = free_port()
    nats_log = tmp_path / "nats.log"
    server = start(["server", "--port", str(port), "--data-dir", str(tmp_path), "--batch-timeout", "1"], nats_log)
    url = nats_ready(nats_log, server)
    procs = [start(["collect", "--server", url, "--data-dir", str(tmp_path)], tmp_path / "collector.log")]
    web_port = free_port()
    procs.append(start(["serve", "--server", url, "--port", str(web_port), "--data-dir", str(tmp_path)], tmp_path / "web.log"))
    base = f"http://127.0.0.1:{web_port}"
    try:
        wait_http(base + "/", procs[-1], tmp_path / "web.log")
        long = "S" * 5000
        for link in (f"/stream?name={long}", f"/replay?stream={long}&consumer={long}&batch_id={long}",
                     f"/streams?stream={long}", f"/incident?batch={long}"):
            page.goto(base + link)
            expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
            if link.startswith("/stream?"):  # not a stream named after the page object ("StreamPage00123")
                expect(page.get_by_text("Open a stream from its name")).to_be_visible(timeout=30_000)
        page.goto(base + "/")
        report = probe(url, "atomic", "--count", "2", "--batch-size", "2", "--abandon",
                       "--stream", "UI_LONG", "--subject", "ui.long")
        expect(page.get_by_text(report["abandoned_batch"])).to_be_visible(timeout=30_000)
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible()
        assert "control line" not in (tmp_path / "web.log").read_text()
    finally:
        for proc in procs + [server]:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)
