"""Blind windows: when the server itself may have dropped an advisory, say so.

An advisory is a core message the server publishes once. The collector reads abandonments from the
advisory stream (durable) and, live, from a subscription; one is lost only when both fail together: the
collector's connection is down (its node died, say) while the advisory stream has no leader to store
it (the same node led it). The collector cannot get such an advisory back, but it can know the window:
from its last look while connected until its subscriptions are back on another server, when the
advisory stream's leader changed meanwhile (a stream that kept its leader stored everything). That
window becomes a `capture_interrupted` event, which Live, History and Incident show.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Callable

from console.broker.capture import stream_leader
from console.broker.connection import Connection, is_connected, reconnects
from console.domain.events import BatchEvent, capture_interrupted

log = logging.getLogger(__name__)

EVERY = 0.25  # seconds between looks at the connection
LEADER_EVERY = 5.0  # seconds between looks at the advisory stream's leader while all is well
LEADER_WAIT = 60.0  # seconds after a reconnect to wait for the advisory stream to have a leader
RESUBSCRIBED = timedelta(seconds=1)  # after a reconnect, until the cluster routes the subscriptions again


def _now() -> datetime:
    return datetime.now(timezone.utc)


class CaptureWatch:
    def __init__(self, nc: Connection, instance: str, advisory_stream: Callable[[], str | None],
                 record: Callable[[list[BatchEvent]], None], beat: Callable[[], None] = lambda: None,
                 deaf: Callable[[datetime, datetime], None] = lambda since, back: None):
        self.nc = nc
        self.deaf = deaf  # told every window the live taps heard nothing (whatever the advisory stream did)
        self.beat = beat  # each pass, for the collector's watch over its loops
        self.instance = instance
        self.advisory_stream = advisory_stream  # None: advisories are followed live only
        self.record = record
        self.leader: str | None = None  # the advisory stream's leader while connected (None: one server)
        self.windows = 0  # blind windows recorded
        self._leader_seen = 0.0

    async def run(self, stopping: Callable[[], bool]) -> None:
        # nats-py can be reconnected to another server between two looks: the reconnect counter tells,
        # and the last look while connected bounds when the connection went down.
        connected_at, known, down_since = _now(), reconnects(self.nc), None
        while not stopping():
            await asyncio.sleep(EVERY)
            self.beat()
            connected, count = is_connected(self.nc), reconnects(self.nc)
            if down_since is None and (not connected or count != known):
                down_since = connected_at
                log.warning("NATS connection lost since %s: watching for a blind window", down_since.isoformat())
            if connected and down_since is not None:
                await self._back(down_since)
                down_since, known = None, reconnects(self.nc)
            if connected and down_since is None:
                connected_at = _now()
                if time.monotonic() - self._leader_seen > LEADER_EVERY:
                    await self._note_leader()

    async def _note_leader(self) -> None:
        stream = self.advisory_stream()
        if stream is None:
            return
        try:
            self.leader = await stream_leader(self.nc, stream)
            self._leader_seen = time.monotonic()
        except Exception as e:  # asked again at the next look
            log.debug("advisory stream leader not read: %r", e)

    async def _back(self, down_since: datetime) -> None:
        back = _now() + RESUBSCRIBED  # the live subscription hears again from here on
        self.deaf(down_since, back)
        stream = self.advisory_stream()
        if stream is None:
            why = "the collector's connection was down and advisories are followed live only"
        else:
            before, leader = self.leader, None
            deadline = time.monotonic() + LEADER_WAIT
            while time.monotonic() < deadline:
                try:
                    leader = await stream_leader(self.nc, stream)
                except Exception:  # no leader yet, or the request timed out while the cluster elects
                    leader = None
                if leader is not None or before is None:
                    break
                self.beat()
                await asyncio.sleep(EVERY)
            self.leader, self._leader_seen = leader, time.monotonic()
            if leader == before:
                log.info("NATS connection back; the advisory stream kept its leader: nothing missed")
                return
            why = (f"the collector's connection was down while the advisory stream {stream} changed leader "
                   f"({before or '?'} -> {leader or 'none yet'})")
        self.windows += 1
        log.warning("capture interrupted from %s to %s: %s", down_since.isoformat(), back.isoformat(), why)
        self.record([capture_interrupted(self.instance, down_since, back, why)])
