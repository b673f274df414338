"""One per web process: follows the event log into a LiveModel that every session reads.

Backfills the last `backfill` of events, then follows live. The NATS connection's state is kept
for the status bar; after a reconnect the follower starts again after the last sequence it
applied (nats-py's own ordered-consumer reset can die while the server comes back), and events
seen twice are ignored by the model.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import Callable

import nats.js.errors
from nats.aio.client import Client

from console.broker.connection import cancelled
from console.broker.eventlog import EventLog, missing_log
from console.config import EventLogSettings
from console.domain.live_model import LiveModel
from console.errors import MissingKeyError

log = logging.getLogger(__name__)
KEY_LOOK_EVERY = 2.0  # seconds between looks for the event key a collector has not made yet


class LiveState:
    def __init__(self, nc: Client, settings: EventLogSettings = EventLogSettings(),
                 backfill: timedelta = timedelta(minutes=60), model: LiveModel | None = None,
                 key_missing: str | None = None, find_key: Callable[[], EventLogSettings] | None = None):
        self.nc = nc
        self.log = EventLog(nc.jetstream(), settings)
        self.key_missing = key_missing  # why there is no key yet: nothing is read until find_key finds it
        self._find_key = find_key
        self.backfill = backfill
        self.model = model or LiveModel()
        self.problem: str | None = None  # shown in the status bar
        self.last_seq = 0  # the last event-log sequence applied
        self.reopening: str | None = None  # while the runtime opens a closed connection again: how it goes
        self._task: asyncio.Task[None] | None = None

    @property
    def connection(self) -> str:
        if self.nc.is_connected:
            return "connected"
        if self.nc.is_reconnecting:
            return "reconnecting"
        if self.nc.is_closed:
            return f"closed · {self.reopening}" if self.reopening else "closed"
        return "disconnected"

    @property
    def key_problem(self) -> str | None:
        """Why this process cannot tell the collector's events from forgeries: no key, or the wrong one."""
        return self.key_missing or self.log.key_problem

    async def rebind(self, nc: Client) -> None:
        """Follow on a new connection (the old one was closed), after the last sequence applied."""
        running = self._task is not None
        await self.stop()
        self.nc = nc
        self.log.js = nc.jetstream()
        self.reopening = None
        if running:
            self.start()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="live-state")

    async def stop(self) -> None:
        if self._task is not None:
            await cancelled(self._task)
            self._task = None

    async def _follow(self) -> None:
        """Follow from the backfill time; after a reconnect, start again after the last sequence
        applied: nats-py's own ordered-consumer reset can die quietly while the server comes back."""
        while self.key_missing and self._find_key is not None:
            try:
                self.log = EventLog(self.nc.jetstream(), self._find_key())
                self.key_missing = None
            except MissingKeyError:
                await asyncio.sleep(KEY_LOOK_EVERY)
        since: datetime | int = self.last_seq + 1 if self.last_seq else datetime.now(timezone.utc) - self.backfill
        while True:
            reconnects = self.nc.stats.get("reconnects", 0)
            follower = asyncio.create_task(self._apply_from(since))
            try:
                while not follower.done() and self.nc.stats.get("reconnects", 0) == reconnects:
                    await asyncio.wait([follower], timeout=1.0)
            finally:
                await cancelled(follower)
            if not follower.cancelled() and (error := follower.exception()) is not None:
                problem = (missing_log(self.log.settings.stream)
                           if isinstance(error, nats.js.errors.NotFoundError) else f"event log not readable: {error}")
                if problem != self.problem:
                    log.warning(problem)
                self.problem = problem
                await asyncio.sleep(1.0)
            if self.last_seq:
                since = self.last_seq + 1

    async def _apply_from(self, since: datetime | int) -> None:
        async for seq, event in self.log.follow(since):
            try:
                if event is not None:
                    self.model.apply(event)
            except Exception:  # a record the model cannot fold is skipped, never read again
                log.exception("event %s at %d not applied", event.event_id if event else None, seq)
                self.log.skipped.add("not applicable")
            self.last_seq = seq
            self.problem = None

    @property
    def skipped(self) -> int:
        """Event-log records read and dropped (malformed, or not signed by the collector)."""
        return sum(self.log.skipped.values())
