"""What `up --demo` holds in memory: the resident set of every process of its tree, by part, sampled
every 5 s for a few minutes, with the peak and the end figure side by side.

    .venv/bin/python bench/footprint.py [--minutes 5]

Starts `batch-console up --demo` (embedded nats-server, a fresh data directory) and sums the RSS of
every descendant of `up` (the JVM of the analytics part and Spark's Python workers included), each
counted under the part it runs for. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.broker.cluster import free_port  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            found[parent].append(int(entry.name))
    return found


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _part(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    for word in (b"server", b"collect", b"serve", b"analytics", b"alerts", b"demo"):
        if word in args:
            return {b"server": "nats", b"serve": "web"}.get(word, word.decode())
    return "?"


def tree_rss(root: int) -> dict[str, int]:
    """Bytes resident per part: each of up's children and everything below it."""
    children = _children()
    by_part: dict[str, int] = {"up": _rss(root)}
    for child in children.get(root, []):
        part, stack, total = _part(child), [child], 0
        while stack:
            pid = stack.pop()
            total += _rss(pid)
            stack.extend(children.get(pid, []))
        by_part[part] = by_part.get(part, 0) + total
    return by_part


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    up = subprocess.Popen([CLI, "up", "--demo", "--data-dir", str(data), "--port", str(free_port()), "--nats-port",
                           str(free_port())], stdout=open(data / "up.out", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    samples: list[dict[str, int]] = []
    try:
        end = time.monotonic() + args.minutes * 60
        while time.monotonic() < end and up.poll() is None:
            time.sleep(5)
            samples.append(tree_rss(up.pid))
            total = sum(samples[-1].values())
            print(f"\r{len(samples) * 5:4d} s  total {total / 2**30:.2f} GiB", end="", file=sys.stderr, flush=True)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=120)
    print(file=sys.stderr)
    last, peak = samples[-1], max(samples, key=lambda s: sum(s.values()))
    print(f"up --demo for {args.minutes:g} min, resident memory by part (MiB): at the end | at the peak")
    for part in sorted(set(last) | set(peak), key=lambda p: -last.get(p, 0)):
        print(f"  {part:10} {last.get(part, 0) / 2**20:8.0f} | {peak.get(part, 0) / 2**20:8.0f}")
    print(f"  {'total':10} {sum(last.values()) / 2**20:8.0f} | {sum(peak.values()) / 2**20:8.0f}"
          f"   ({sum(last.values()) / 2**30:.2f} GiB at the end; target 2.5)")


if __name__ == "__main__":
    main()
