"""What `up --demo` holds in memory: the resident set of every process of its tree, by part, sampled
every 5 s for a few minutes, with the peak and the end figure side by side.

    .venv/bin/python bench/footprint.py [--minutes 5] [--before b405aef]

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
ROOT = Path(__file__).resolve().parents[1]
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


def measure(minutes: float, code: Path | None) -> tuple[dict[str, int], dict[str, int]]:
    """(at the end, at the peak) of `up --demo`, run from `code` (None: this checkout)."""
    data = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}  # every part imports the older console
    up = subprocess.Popen([CLI, "up", "--demo", "--data-dir", str(data), "--port", str(free_port()), "--nats-port",
                           str(free_port())], stdout=open(data / "up.out", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True, env=env)
    samples: list[dict[str, int]] = []
    try:
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end and up.poll() is None:
            time.sleep(5)
            samples.append(tree_rss(up.pid))
            total = sum(samples[-1].values())
            print(f"\r{code.name if code else 'this checkout'}: {len(samples) * 5:4d} s  total "
                  f"{total / 2**30:.2f} GiB", end="", file=sys.stderr, flush=True)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=120)
    print(file=sys.stderr)
    return samples[-1], max(samples, key=lambda s: sum(s.values()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--before", default="b405aef", help="the commit set beside this checkout")
    args = parser.parse_args()
    old = Path(tempfile.mkdtemp(prefix="bench-footprint-before-")) / args.before
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    (now_end, now_peak), (then_end, then_peak) = measure(args.minutes, None), measure(args.minutes, old)
    print(f"up --demo for {args.minutes:g} min, resident MiB by part: this checkout at the end, at the peak | "
          f"{args.before} at the end, at the peak")
    for part in sorted(set(now_end) | set(then_end), key=lambda p: -now_end.get(p, 0)):
        print(f"  {part:10} {now_end.get(part, 0) / 2**20:8.0f} {now_peak.get(part, 0) / 2**20:8.0f} | "
              f"{then_end.get(part, 0) / 2**20:8.0f} {then_peak.get(part, 0) / 2**20:8.0f}")
    a, b = sum(now_end.values()), sum(then_end.values())
    print(f"  {'total':10} {a / 2**20:8.0f} {sum(now_peak.values()) / 2**20:8.0f} | {b / 2**20:8.0f} "
          f"{sum(then_peak.values()) / 2**20:8.0f}   ({a / 2**30:.2f} GiB at the end, target 2.5; ratio {a / b:.2f})")


if __name__ == "__main__":
    main()
