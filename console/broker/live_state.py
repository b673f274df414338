"""One per web process: follows the event log into a LiveModel that every session reads.

Backfills the last `backfill` of events, then follows live. The NATS connection's state is kept
for the status bar; when the connection drops and returns, the ordered consumer resumes on its
own (nats-py resets it), and events seen twice are ignored by the model.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

import nats.js.errors
from nats.aio.client import Client

from console.broker.eventlog import EventLog, EventLogSettings
from console.domain.live_model import LiveModel

log = logging.getLogger(__name__)


class LiveState:
    def __init__(self, nc: Client, settings: EventLogSettings = EventLogSettings(),
                 backfill: timedelta = timedelta(minutes=60), model: LiveModel | None = None):
        self.nc = nc
        self.log = EventLog(nc.jetstream(), settings)
        self.backfill = backfill
        self.model = model or LiveModel()
        self.problem: str | None = None  # shown in the status bar
        self._task: asyncio.Task | None = None

    @property
    def connection(self) -> str:
        if self.nc.is_connected:
            return "connected"
        if self.nc.is_reconnecting:
            return "reconnecting"
        return "closed" if self.nc.is_closed else "disconnected"

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="live-state")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
            self._task = None

    async def _follow(self) -> None:
        since = datetime.now(timezone.utc) - self.backfill
        while True:
            try:
                async for _, event in self.log.follow(since):
                    self.model.apply(event)
                    self.problem = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # no event log yet, or a dropped connection: say so, retry
                problem = (f"no event log {self.log.settings.stream} yet (is the collector running?)"
                           if isinstance(e, nats.js.errors.NotFoundError) else f"event log not readable: {e}")
                if problem != self.problem:
                    log.warning(problem)
                self.problem = problem
                since = self.model.last_event or since
                await asyncio.sleep(1.0)
