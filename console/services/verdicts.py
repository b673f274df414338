"""The clients' conformance verdicts as the pages and the CLI read them from the event log."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Callable

from console.broker.connection import Connection
from console.config import EventLogSettings
from console.domain.conformance import Verdicts

WINDOW = 24 * 60.0  # minutes of the event log the verdicts are read from
KEPT_FOR = 5.0  # seconds a read of them is kept: every page of every session asks


class VerdictsReader:
    def __init__(self, connection: Callable[[], Connection], event_log: Callable[[], EventLogSettings]):
        self._connection, self._event_log = connection, event_log
        self._read: tuple[float, Verdicts] | None = None

    async def __call__(self, window_minutes: float = WINDOW) -> Verdicts:
        """The clients' latest verdicts in the event log's last `window_minutes`."""
        now = time.monotonic()
        if self._read is None or now - self._read[0] > KEPT_FOR or window_minutes != WINDOW:
            found = await self._read_log(window_minutes)
            if window_minutes != WINDOW:
                return found
            self._read = (now, found)
        return self._read[1]

    def recent(self) -> Verdicts | None:
        """The last read (however old), or None."""
        return self._read[1] if self._read else None

    async def _read_log(self, window_minutes: float) -> Verdicts:
        from console.broker.eventlog import EventLog
        from console.domain.events import EventKind

        end = datetime.now(timezone.utc)
        found = Verdicts()
        for _, event in await EventLog.over(self._connection(), self._event_log()).window(
                end - timedelta(minutes=window_minutes), end, kind_filter=f"{EventKind.CONFORMANCE.value}.>",
                idle_timeout=2.0):  # the read ends at the last one; this long is waited only when there is none
            found.apply(event)
        return found
