"""The copies at this system of the named domains' atomic streams (a hub's stream sourcing, or mirroring, a
leaf's), each batch followed from its origin into them (console.domain.copies): the origin read through
its domain's API and the copy here, both headers only and from now on (console.broker.copies). Looked for
again every minute; what cannot be read is said in the log and looked for again, never a stop."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from console.broker.connection import Connection
from console.broker.copies import copies_of, read_headers, stop_reading
from console.domain.copies import STREAM_SOURCE, CopyFollower
from console.domain.events import BatchEvent

log = logging.getLogger(__name__)
LOOK_EVERY = 60.0  # seconds between two looks for copies
TICK = 1.0  # seconds between two judgements of the batches followed
COPY_LAG = timedelta(hours=1)  # how long a copy may lag behind a batch (a leaf cut off) before it is let go unjudged


def _now() -> datetime:
    return datetime.now(timezone.utc)


class CopyWatch:
    def __init__(self, nc: Connection, domains: tuple[str, ...],
                 record: Callable[[list[BatchEvent]], None], beat: Callable[[], None] = lambda: None):
        self.nc, self.domains, self.record, self.beat = nc, domains, record, beat
        self.follower = CopyFollower([], COPY_LAG)
        self._subs: dict[tuple[str, str | None], Any] = {}  # (stream, its domain) -> its reader

    async def run(self, stopping: Callable[[], bool]) -> None:
        looked = -LOOK_EVERY
        while not stopping():
            self.beat()
            now = asyncio.get_running_loop().time()
            if now - looked >= LOOK_EVERY:
                looked = now
                await self._look()
            if events := self.follower.tick(_now()):
                self.record(events)
            await asyncio.sleep(TICK)
        for sub in self._subs.values():
            await stop_reading(sub)

    async def _look(self) -> None:
        try:
            copies = await copies_of(self.nc, self.domains)
            for copy in copies:
                await self._read(copy.origin, copy.domain, self._origin(copy.origin))
                await self._read(copy.stream, None, self._copy(copy.stream))
            self.follower.copies = {c.stream: c for c in copies}
        except Exception as e:  # a leaf cut off, a permission: said, and looked for again
            log.warning("copies of the domains' atomic streams not followed: %s", str(e)[:200])

    async def _read(self, stream: str, domain: str | None, seen: Callable[[int, dict[str, str] | None], None]) -> None:
        if (stream, domain) not in self._subs:
            self._subs[(stream, domain)] = await read_headers(self.nc, stream, domain, seen)

    def _origin(self, origin: str) -> Callable[[int, dict[str, str] | None], None]:
        return lambda seq, headers: self.follower.origin_message(origin, seq, headers, _now())

    def _copy(self, copy: str) -> Callable[[int, dict[str, str] | None], None]:
        return lambda seq, headers: self.follower.copy_message(copy, seq, (headers or {}).get(STREAM_SOURCE), _now())
