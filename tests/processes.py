"""The console's own command as a process, how tests wait for it, and a webhook receiver (shared by the
test folders)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from console.broker.cluster import free_port  # noqa: F401  (the tests' one way to a free port)

CLI = str(Path(sys.executable).parent / "batch-console")


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            # a loaded two-core machine answers a first page in 2-7 s: a shorter wait never saw the answer
            with urllib.request.urlopen(url, timeout=15) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None, f"web process exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"web process not answering:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def wait_collecting(proc: subprocess.Popen, log: Path, starts: int = 1, timeout: float = 120) -> None:
    """Until the collector's `starts`-th start in its log has its taps in place: a fast batch's flow
    acks are seen only live, so one sent before then is not the collector's to see."""
    deadline = time.monotonic() + timeout
    while log.read_text().count("collecting into") < starts:
        assert proc.poll() is None, f"collector exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"collector not collecting:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def probe(nats_url: str, *args: str) -> dict:
    """`batch-console probe ... --json` against a server: its report."""
    done = subprocess.run([CLI, "probe", *args, "--server", nats_url, "--json"], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


def nats_tool(*args: str) -> str:
    """tests/ui/nats_tool.py in its own process: what a second client sees."""
    done = subprocess.run([sys.executable, "-m", "tests.ui.nats_tool", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Receiver:
    """A webhook receiver on loopback: the JSON bodies it was sent, in order (and every request's
    method); with `redirect_to`, it answers each POST 301 to that URL."""

    def __init__(self, redirect_to: str | None = None):
        self.bodies: list[dict] = []
        self.methods: list[str] = []
        received, methods = self.bodies, self.methods

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                methods.append("POST")
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(301 if redirect_to else 204)
                if redirect_to:
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                methods.append("GET")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def children_of_serve(port: int, marker: bytes) -> list[int]:
    """The processes whose command line holds `marker` and whose parent is the web app serving on `port`."""
    def cmdline(pid: str) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    pids = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()]
    webs = {pid for pid in pids if b"serve" in cmdline(pid) and f"--port\0{port}\0".encode() in cmdline(pid)}
    found = []
    for pid in pids:
        try:
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if parent in webs and marker in cmdline(pid):
            found.append(int(pid))
    return found
