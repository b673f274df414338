"""The console's own command as a process, and how tests wait for it (shared by the test folders)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from console.broker.cluster import free_port  # noqa: F401  (the tests' one way to a free port)

CLI = str(Path(sys.executable).parent / "batch-console")


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None, f"web process exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"web process not answering:\n{log.read_text()[-3000:]}"
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
