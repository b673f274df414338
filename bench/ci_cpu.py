"""Where a command's CPU goes, by kind of process: every process on the machine is read from /proc each half
second while the command runs, and its CPU time (user and system) counted once under its kind (a Spark JVM,
Chromium, a nats-server, `serve`, each other `batch-console` command, the pytest workers, other Python).
What processes had spent before the command began is not counted, but whatever else runs meanwhile is (run
it on a quiet machine); a process that lives less than half a second is not seen. Figures are CPU-seconds and shares of the whole, not times: this machine is shared.

    .venv/bin/python bench/ci_cpu.py -- bash scripts/test.sh -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
EVERY = 0.5


def kind(argv: list[bytes]) -> str:
    """What a process is, from its command line."""
    if not argv:
        return "other"
    program = os.path.basename(argv[0]).decode(errors="replace")
    if program == "java":
        return "Spark JVM (java)"
    if "chrom" in program:
        return "Chromium"
    if program in ("nats-server", "node", "prometheus"):
        return program
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == b"batch-console":
            rest = [a.decode(errors="replace") for a in argv[i + 1:] if a and not a.startswith(b"-")]
            return f"batch-console {rest[0] if rest else ''}".strip()
    if program.startswith("python"):
        if b"execnet" in b" ".join(argv) or argv[1:3] == [b"-u", b"-c"]:
            return "pytest workers"
        if b"pytest" in b" ".join(argv[1:3]):
            return "pytest"
        return "other Python"
    return "other"


def _read(pid: str) -> tuple[str, float, str] | None:
    """The process's key (its pid and start time), CPU-seconds so far and kind."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return f"{pid}:{fields[19]}", (int(fields[11]) + int(fields[12])) / TICK, kind([a for a in argv if a])


def sample(command: list[str]) -> tuple[Counter[str], Counter[str], int]:
    """CPU-seconds and processes per kind while `command` runs, and its exit code."""
    before: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if (found := _read(pid)) is not None:
            before[found[0]] = found[1]
    seen: dict[str, tuple[float, str]] = {}
    proc = subprocess.Popen(command)
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if (found := _read(pid)) is not None:
                key, cpu, what = found
                name = what if what != "other" or key not in seen else seen[key][1]
                seen[key] = (cpu - before.get(key, 0.0), name)  # a command line changes at exec: the last kept
        if proc.poll() is not None:
            break
        time.sleep(EVERY)
    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for spent, what in seen.values():
        cpu[what] += spent
        count[what] += 1
    return cpu, count, proc.returncode


def main() -> None:
    command = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    if not command:
        sys.exit(__doc__)
    began = time.monotonic()
    cpu, count, code = sample(command)
    wall = time.monotonic() - began
    total = sum(cpu.values()) or 1.0
    print(f"\n{'kind':<28}{'CPU-s':>9}{'share':>8}{'procs':>7}{'CPU-s each':>12}")
    for what, spent in cpu.most_common():
        if spent >= 0.5:
            print(f"{what:<28}{spent:>9.1f}{spent / total:>8.1%}{count[what]:>7}{spent / count[what]:>12.2f}")
    print(f"{'all':<28}{total:>9.1f}{'':>8}{sum(count.values()):>7}   in {wall:.0f} s: {total / wall:.2f} cores "
          f"of {os.cpu_count()} (the command's exit code {code})")
    sys.exit(code)


if __name__ == "__main__":
    main()
