"""What `up --demo` holds in memory: every process of its tree, by part, sampled every 5 s for a few
minutes; the last minute's median, most and end, as RSS (each process's resident set, summed: pages
that processes share counted in each) and PSS (each shared page split among the processes sharing
it: what the tree holds in all), this checkout beside an older one.

    .venv/bin/python bench/footprint.py [--minutes 5] [--before b405aef]

Starts `batch-console up --demo` (embedded nats-server, a fresh data directory) and sums the RSS of
every descendant of `up` (the JVM of the analytics part and Spark's Python workers included), each
counted under the part it runs for. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
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


def _pss(pid: int) -> int:
    """The process's share of what it has resident: a page shared by n processes counts 1/n in each
    (Spark's forked Python workers share most of their daemon's pages; the RSS sum counts them n times)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
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


def tree_memory(root: int, measure=_rss) -> dict[str, int]:
    """Bytes per part (RSS or PSS): each of up's children and everything below it."""
    children = _children()
    by_part: dict[str, int] = {"up": measure(root)}
    for child in children.get(root, []):
        part, stack, total = _part(child), [child], 0
        while stack:
            pid = stack.pop()
            total += measure(pid)
            stack.extend(children.get(pid, []))
        by_part[part] = by_part.get(part, 0) + total
    return by_part


LAST = 12  # samples (5 s apart) of the last minute: a sample lands inside or between analytics runs


def measure(minutes: float, code: Path | None) -> dict[str, list[dict[str, int]]]:
    """RSS and PSS by part, every 5 s, of `up --demo` run from `code` (None: this checkout)."""
    data = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}  # every part imports the older console
    up = subprocess.Popen([CLI, "up", "--demo", "--data-dir", str(data), "--port", str(free_port()), "--nats-port",
                           str(free_port())], stdout=open(data / "up.out", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True, env=env)
    samples: dict[str, list[dict[str, int]]] = {"rss": [], "pss": []}
    try:
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end and up.poll() is None:
            time.sleep(5)
            samples["rss"].append(tree_memory(up.pid, _rss))
            samples["pss"].append(tree_memory(up.pid, _pss))
            print(f"\r{code.name if code else 'this checkout'}: {len(samples['rss']) * 5:4d} s  RSS "
                  f"{sum(samples['rss'][-1].values()) / 2**30:.2f} GiB, PSS {sum(samples['pss'][-1].values()) / 2**30:.2f}"
                  " GiB", end="", file=sys.stderr, flush=True)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=120)
    print(file=sys.stderr)
    return samples


def _figures(samples: list[dict[str, int]]) -> tuple[float, float, float]:
    """MiB in all over the last minute: (median, most, at the end)."""
    totals = [sum(s.values()) / 2**20 for s in samples[-LAST:]]
    return statistics.median(totals), max(totals), totals[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--before", default="b405aef", help="the commit set beside this checkout")
    args = parser.parse_args()
    old = Path(tempfile.mkdtemp(prefix="bench-footprint-before-")) / args.before
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    now, then = measure(args.minutes, None), measure(args.minutes, old)
    print(f"up --demo, its last minute of {args.minutes:g}: MiB by part (median) | in all (median, most, at the end), "
          f"this checkout vs {args.before}")
    for kind in ("rss", "pss"):
        print(f"{kind.upper()}")
        parts = sorted(set(now[kind][-1]) | set(then[kind][-1]), key=lambda p: -now[kind][-1].get(p, 0))
        for part in parts:
            a = statistics.median(s.get(part, 0) for s in now[kind][-LAST:]) / 2**20
            b = statistics.median(s.get(part, 0) for s in then[kind][-LAST:]) / 2**20
            print(f"  {part:10} {a:8.0f} | {b:8.0f}")
        (a50, amax, aend), (b50, bmax, bend) = _figures(now[kind]), _figures(then[kind])
        print(f"  {'in all':10} {a50:8.0f} {amax:8.0f} {aend:8.0f} | {b50:8.0f} {bmax:8.0f} {bend:8.0f}   "
              f"(median {a50 / 1024:.2f} GiB, most {amax / 1024:.2f} GiB; target 2.5; median ratio {a50 / b50:.2f})")


if __name__ == "__main__":
    main()
