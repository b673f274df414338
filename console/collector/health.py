"""Is the collector doing its job? Supervised loops, and a verdict the Live page can trust.

"Alive" is not "a status arrived": the verdict names what is wrong (a loop silent or restarting,
writes to the event log stuck, the advisory backlog growing), and an empty verdict is healthy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable

from console.backoff import Backoff
from console.domain.wire import Tally

log = logging.getLogger(__name__)

SILENT_AFTER = 30.0  # seconds without a pass before a loop counts as silent
STUCK_AFTER = 30.0  # seconds one write to the event log may take before it counts as stuck
LAG_WINDOW = 60.0  # seconds over which a growing advisory backlog is unhealthy
MAX_RESTART_PAUSE = 30.0


class Loops:
    """Runs each loop as a task that is started again, with backoff, whenever it fails."""

    def __init__(self, errors: Tally):
        self.errors = errors
        self.restarts: dict[str, int] = {}
        self.last_error: dict[str, str] = {}
        self._beats: dict[str, float] = {}

    def start(self, name: str, run: Callable[[], Awaitable[None]], finished: Callable[[], bool]) -> asyncio.Task[None]:
        """`run` is the loop; `finished` says whether an end is the one asked for (a stop)."""
        self._beats[name] = time.monotonic()
        return asyncio.create_task(self._supervise(name, run, finished), name=f"collector-{name}")

    def beat(self, name: str) -> None:
        self._beats[name] = time.monotonic()

    async def _supervise(self, name: str, run: Callable[[], Awaitable[None]], finished: Callable[[], bool]) -> None:
        backoff = Backoff(first=0.5, most=MAX_RESTART_PAUSE)
        while True:
            try:
                await run()
                if finished():
                    return
                raise RuntimeError("the loop ended by itself")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if finished():
                    return
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self.last_error[name] = f"{type(e).__name__}: {e}"[:300]
                self.errors.add(f"{name} loop failed")
                pause = backoff.wait()
                log.error("%s loop failed (%s); starting it again in %.1fs", name, self.last_error[name], pause,
                          exc_info=e)
                await asyncio.sleep(pause)
                self.beat(name)

    def stale(self, now: float) -> dict[str, float]:
        """Loops that beat and have not for a while: name -> seconds since their last pass."""
        return {name: now - at for name, at in self._beats.items() if now - at > SILENT_AFTER}

    def status(self) -> dict[str, dict[str, Any]]:
        return {name: {"restarts": n, "last_error": self.last_error.get(name)} for name, n in self.restarts.items()}

    def forget(self, name: str) -> None:
        """A loop that only beats while it has work (the writer) is not watched for silence."""
        self._beats.pop(name, None)


class Health:
    def __init__(self) -> None:
        self._writing_since: float | None = None
        self._lags: deque[tuple[float, int]] = deque(maxlen=200)

    def writing(self, now: float) -> None:
        self._writing_since = now

    def written(self) -> None:
        self._writing_since = None

    def verdict(self, now: float, advisory_lag: int | None, silent: dict[str, float], queued: int) -> list[str]:
        """What is wrong, in words; empty when the collector is doing its job."""
        wrong = [f"{name} loop silent for {seconds:.0f}s" for name, seconds in sorted(silent.items())]
        if self._writing_since is not None and now - self._writing_since > STUCK_AFTER:
            wrong.append(f"event log writes stuck for {now - self._writing_since:.0f}s ({queued} events queued)")
        if advisory_lag is not None:
            self._lags.append((now, advisory_lag))
            while self._lags and now - self._lags[0][0] > 2 * LAG_WINDOW:
                self._lags.popleft()
            old = [lag for at, lag in self._lags if now - at >= LAG_WINDOW]
            if old and advisory_lag > 0 and all(advisory_lag > lag for lag in old):
                wrong.append(f"advisory backlog growing ({advisory_lag} pending)")
        return wrong
