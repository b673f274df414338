"""A terminal progress bar for long CLI work; silent when stderr is not a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, total: int, label: str = "", stream: TextIO | None = None, width: int = 30, min_interval: float = 0.1):
        self.total = max(total, 1)
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.min_interval = min_interval
        self.enabled = self.stream.isatty()
        self._started = time.monotonic()
        self._last_draw = 0.0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last_draw < self.min_interval and done < self.total):
            return
        self._last_draw = now
        fraction = min(done / self.total, 1.0)
        filled = int(self.width * fraction)
        rate = done / max(now - self._started, 1e-9)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{self.total} {rate:,.0f}/s")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
