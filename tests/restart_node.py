"""A node's restart as an operator's command does it, for `maintain restart --run`: the node's nats-server
(its pid from the pid file in its store) signalled, waited for until it exits, and started again, apart
from the caller, on the same configuration. `--signal ldm`: lame duck mode, as a rolling upgrade does.

    python -m tests.restart_node STORE_DIR [--signal ldm|term]"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from console.broker.server import find_nats_server

SIGNALS = {"ldm": signal.SIGUSR2, "term": signal.SIGTERM}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--signal", choices=sorted(SIGNALS), default="ldm")
    args = parser.parse_args()
    pid = int((args.store / "nats-server.pid").read_text())
    os.kill(pid, SIGNALS[args.signal])
    deadline = time.monotonic() + 90
    while _alive(pid):
        if time.monotonic() > deadline:
            print(f"nats-server {pid} still running after 90 s", file=sys.stderr)
            return 1
        time.sleep(0.05)
    print(f"nats-server {pid} exited; starting it again")
    subprocess.Popen([str(find_nats_server()), "-c", str(args.store / "nats-server.conf"),
                      "-l", str(args.store / "nats-server.log")], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of its parent (the test that started it) has exited all the same
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
