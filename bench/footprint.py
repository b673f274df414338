"""What `up --demo` holds in memory and how many cores it uses: every process of its tree, by part,
this checkout beside an older one, on a busy machine (a spinning process beside it by default).

    .venv/bin/python bench/footprint.py [--minutes 10] [--before 8c8b3c1] [--busy 1]

Starts `batch-console up --demo` (embedded nats-server, a fresh data directory) and samples every
descendant of `up` (the JVM of the analytics part and Spark's Python workers included), each counted
under the part it runs for: RSS (each process's resident set, summed: pages that processes share
counted in each) and PSS (a shared page split among its processes: what the tree holds in all) every
5 s, their median and worst sample over the run; and each process's CPU every second, as cores by
part after the first minute. A benchmark, not a test.
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
TICKS = os.sysconf("SC_CLK_TCK")


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


WARM = 60  # seconds of start before the steady state is counted (JVM start, the first analytics run)


def _cpu_ticks(pid: int) -> int:
    """The process's own CPU (user + system, clock ticks), its waited children not included."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return -1


class CpuMeter:
    """Cores used by part over the steady state: each process's own CPU, sampled every second (one that
    lives less than a second between samples is missed; a Spark worker lives for a run)."""

    def __init__(self, root: int):
        self.root = root
        self.seen: dict[int, tuple[str, int, int]] = {}  # pid -> (part, ticks when counting began, ticks last seen)
        self.counting_since: float | None = None

    def sample(self, counting: bool) -> None:
        if counting and self.counting_since is None:
            self.counting_since = time.monotonic()
            self.seen = {pid: (part, last, last) for pid, (part, _, last) in self.seen.items()}
        children = _children()
        stack = [(self.root, "up")]
        while stack:
            pid, part = stack.pop()
            ticks = _cpu_ticks(pid)
            if ticks >= 0:
                began = self.seen[pid][1] if pid in self.seen else (0 if counting else ticks)
                self.seen[pid] = (part, began, ticks)
            stack.extend((child, _part(child) if pid == self.root else part) for child in children.get(pid, []))

    def cores(self) -> dict[str, float]:
        wall = time.monotonic() - (self.counting_since or time.monotonic())
        by_part: dict[str, float] = defaultdict(float)
        for part, began, last in self.seen.values():
            by_part[part] += (last - began) / TICKS / max(wall, 1e-9)
        return dict(by_part)


def _busy(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        sum(i * i for i in range(10_000))


def measure(minutes: float, code: Path | None, busy: int) -> tuple[list[dict[str, int]], list[dict[str, int]], dict]:
    """RSS and PSS by part every 5 s, and cores by part over the steady state, of `up --demo` run from
    `code` (None: this checkout), with `busy` processes spinning beside it."""
    import multiprocessing

    data = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}  # every part imports the older console
    up = subprocess.Popen([CLI, "up", "--demo", "--data-dir", str(data), "--port", str(free_port()), "--nats-port",
                           str(free_port())], stdout=open(data / "up.out", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True, env=env)
    rss: list[dict[str, int]] = []
    pss: list[dict[str, int]] = []
    cpu = CpuMeter(up.pid)
    started = time.monotonic()
    end = started + minutes * 60
    spinners = [multiprocessing.Process(target=_busy, args=(end,), daemon=True) for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    try:
        tick = 0
        while time.monotonic() < end and up.poll() is None:
            time.sleep(1)
            tick += 1
            cpu.sample(counting=time.monotonic() - started >= WARM)
            if tick % 5 == 0:
                rss.append(tree_memory(up.pid, _rss))
                pss.append(tree_memory(up.pid, _pss))
                print(f"\r{code.name if code else 'this checkout'}: {tick:4d} s  RSS {sum(rss[-1].values()) / 2**30:.2f} "
                      f"GiB (most {max(sum(r.values()) for r in rss) / 2**30:.2f}), PSS {sum(pss[-1].values()) / 2**30:.2f}"
                      f" GiB, load {os.getloadavg()[0]:.1f}", end="", file=sys.stderr, flush=True)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=120)
        for spinner in spinners:
            spinner.terminate()
    print(file=sys.stderr)
    return rss, pss, {"cores": cpu.cores(), "load": os.getloadavg()[1]}


def _figures(samples: list[dict[str, int]]) -> tuple[float, float, float]:
    """MiB in all over the whole run: (median, most, at the end)."""
    totals = [sum(s.values()) / 2**20 for s in samples]
    return statistics.median(totals), max(totals), totals[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--before", default="8c8b3c1", help="the commit set beside this checkout")
    parser.add_argument("--busy", type=int, default=1, help="processes spinning beside up (a busy machine)")
    args = parser.parse_args()
    old = Path(tempfile.mkdtemp(prefix="bench-footprint-before-")) / args.before
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    runs = {"now": measure(args.minutes, None, args.busy), "before": measure(args.minutes, old, args.busy)}
    print(f"up --demo for {args.minutes:g} min with {args.busy} busy process(es) beside it, this checkout | "
          f"{args.before} (5-min load average at the end: {runs['now'][2]['load']:.1f} | {runs['before'][2]['load']:.1f})")
    for kind, index in (("RSS", 0), ("PSS", 1)):
        now, then = runs["now"][index], runs["before"][index]
        print(f"{kind} MiB by part (median over the run)")
        for part in sorted(set(now[-1]) | set(then[-1]), key=lambda p: -now[-1].get(p, 0)):
            a = statistics.median(s.get(part, 0) for s in now) / 2**20
            b = statistics.median(s.get(part, 0) for s in then) / 2**20
            print(f"  {part:10} {a:8.0f} | {b:8.0f}")
        (a50, amax, aend), (b50, bmax, bend) = _figures(now), _figures(then)
        print(f"  {'in all':10} median {a50:6.0f} most {amax:6.0f} end {aend:6.0f} | median {b50:6.0f} most {bmax:6.0f} "
              f"end {bend:6.0f}   (most {amax / 1024:.2f} GiB vs {bmax / 1024:.2f}; ratio {amax / bmax:.2f})")
    now_cores, then_cores = runs["now"][2]["cores"], runs["before"][2]["cores"]
    print(f"cores by part after the first {WARM} s")
    for part in sorted(set(now_cores) | set(then_cores), key=lambda p: -now_cores.get(p, 0)):
        print(f"  {part:10} {now_cores.get(part, 0):8.3f} | {then_cores.get(part, 0):8.3f}")
    a, b = sum(now_cores.values()), sum(then_cores.values())
    print(f"  {'in all':10} {a:8.3f} | {b:8.3f}   (ratio {a / max(b, 1e-9):.2f})")


if __name__ == "__main__":
    main()
