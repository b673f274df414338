"""What the benchmarks measure with: a process's CPU time, percentiles, a median's interval."""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import statistics
import time
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median_interval(values: list[float], draws: int = 2000) -> tuple[float, float]:
    """A bootstrap 95% interval of the median: how far a rerun's figure may fall on this machine."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(draws * 0.025)], medians[int(draws * 0.975) - 1]


async def until(condition, timeout: float, what: str, every: float = 0.05):
    """condition() (a value, or an awaitable of one) until it is true; TimeoutError(what) past the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(every)
