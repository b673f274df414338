"""The one policy for everything the console tries again (a part, a loop, a connection, a system, a
write to the event log): a wait that doubles after each failure in a row, from `first` to `most`, and
starts over after a success or once what it guards has run `stable_after` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, TypeVar, overload

T = TypeVar("T")


@dataclass
class Backoff:
    first: float = 1.0
    most: float = 60.0
    stable_after: float | None = None  # seconds of running that count as a success (None: only reset() does)
    failures: int = 0
    _started: float = field(default_factory=time.monotonic, repr=False)

    @property
    def recovered(self) -> bool:
        """What it guards has run `stable_after` seconds since it last started: its failures are behind it."""
        return self.stable_after is not None and time.monotonic() - self._started >= self.stable_after

    def wait(self) -> float:
        """The wait before the next try, this failure counted."""
        if self.recovered:
            self.failures = 0
        self.failures += 1
        return self.after(self.failures)

    def after(self, failures: int) -> float:
        """The wait after `failures` failures in a row (0: none)."""
        return min(self.first * 2.0 ** (failures - 1), self.most) if failures > 0 else 0.0

    def started(self) -> None:
        """What it guards starts running (again): `stable_after` counts from here."""
        self._started = time.monotonic()

    def reset(self) -> None:
        self.failures = 0


Failures = type[Exception] | tuple[type[Exception], ...]


@overload
async def keep_trying(attempt: Callable[[], Awaitable[T]], backoff: Backoff, retry_on: Failures,
                      said: Callable[[Exception, float], None], stop: None = None) -> T: ...


@overload
async def keep_trying(attempt: Callable[[], Awaitable[T]], backoff: Backoff, retry_on: Failures,
                      said: Callable[[Exception, float], None], stop: asyncio.Event) -> T | None: ...


async def keep_trying(attempt: Callable[[], Awaitable[T]], backoff: Backoff, retry_on: Failures,
                      said: Callable[[Exception, float], None], stop: asyncio.Event | None = None) -> T | None:
    """`attempt()` until it returns (its answer), each failure of the kinds `retry_on` said (the error, the
    wait) and waited for as `backoff` says; None once `stop` is set, which also cuts a wait short."""
    while stop is None or not stop.is_set():
        backoff.started()
        try:
            return await attempt()
        except retry_on as e:
            wait = backoff.wait()
            said(e, wait)
            if stop is None:
                await asyncio.sleep(wait)
            else:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
    return None
