"""The web app on IPv6 loopback, without a readable console.db, and behind a guarded password."""

from __future__ import annotations

import http.client
import subprocess
import urllib.parse
from contextlib import contextmanager

from playwright.sync_api import expect

from tests.processes import CLI, free_port, wait_http


@contextmanager
def serving(nats_url: str, tmp_path, *extra: str, address: str = "127.0.0.1"):
    port = free_port()
    log = tmp_path / "web.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([CLI, "serve", "--server", nats_url, "--address", address, "--port", str(port),
                                 "--data-dir", str(tmp_path), *extra], stdout=out, stderr=subprocess.STDOUT)
    host = f"[{address}]" if ":" in address else address
    try:
        wait_http(f"http://{host}:{port}/login" if "--basic-auth" in extra else f"http://{host}:{port}/", proc, log)
        yield host, port, log
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_ipv6_loopback_serves_live_pages_and_a_corrupt_database_only_empties_history(console, page, tmp_path):
    nats_url, _ = console
    (tmp_path / "console.db").write_bytes(b"this is not a database" * 100)
    with serving(nats_url, tmp_path, address="::1") as (host, port, log):
        page.goto(f"http://{host}:{port}/")
        expect(page.get_by_text("Lost batches, live")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)  # the websocket is up
        page.goto(f"http://{host}:{port}/history")
        expect(page.get_by_text("History unavailable")).to_be_visible(timeout=30_000)
        assert "Live, Streams and Replay go on" in log.read_text()


def login(host: str, port: int, password: str, source: str | None = None) -> str:
    """POST the login form (from the loopback address `source`); where the server sends the browser next."""
    conn = http.client.HTTPConnection(host.strip("[]"), port, timeout=10,
                                      source_address=(source, 0) if source else None)
    body = urllib.parse.urlencode({"username": "operator", "password": password})
    conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
    reply = conn.getresponse()
    conn.close()
    assert reply.status == 302, reply.status
    return reply.getheader("Location")


def test_failed_logins_are_bounded_per_minute_and_the_right_password_works_before(console, tmp_path):
    nats_url, _ = console
    with serving(nats_url, tmp_path, "--basic-auth", "correct horse") as (host, port, _):
        assert "error" not in login(host, port, "correct horse")
        for _ in range(5):
            assert "error" in login(host, port, "guess")
        assert "error" in login(host, port, "correct horse")  # this address waits now


def test_failures_from_many_addresses_never_lock_out_the_operator_from_a_fresh_one(console, tmp_path):
    """Sixty addresses of 127.0.0.0/8 fail once each (past the 50 a minute of all addresses together):
    those that failed wait, an address that has not failed logs in at once."""
    nats_url, _ = console
    with serving(nats_url, tmp_path, "--basic-auth", "correct horse") as (host, port, log):
        for n in range(10, 70):
            assert "error" in login(host, port, "guess", source=f"127.0.0.{n}")
        assert "error" in login(host, port, "correct horse", source="127.0.0.10")  # it failed: it waits
        assert "error" not in login(host, port, "correct horse", source="127.0.0.200")
        assert "error" not in login(host, port, "correct horse", source="127.0.1.1")
