"""One NATS system as the console reaches it: its servers and credentials (an account's connection),
its system account's connection when one is configured, its monitoring URL, stream administration
over them, and the server's batch limits. A process's runtime (console.runtime) builds its services
on a system; several systems are several of these, each kept open on its own."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from console.backoff import Backoff, keep_trying
from console.broker.admin import StreamAdmin
from console.broker.consumers import ConsumerAdmin
from console.broker.connection import Connection, cancelled, close, connect, is_closed, why_closed
from console.broker.server_info import read_varz, server_syncs
from console.config import Settings
from console.domain.batch_limits import BatchLimits
from console.domain.durability import ServerSync

log = logging.getLogger(__name__)
ASSUMED = "the server's defaults, assumed"  # how batch_limits() says it did not read them
LIMITS_FOR = 60.0  # seconds the server's limits are kept before /varz is asked again
REOPEN_BACKOFF = (1.0, 60.0)  # seconds before opening a closed connection again: first, most


class NatsSystem:
    def __init__(self, settings: Settings, nc: Connection, system_nc: Connection | None = None):
        self.name, self.settings = settings.fleet.name, settings  # Settings.of_system names a systems file's
        self.nc = nc
        self.system_nc = system_nc
        self.admin = StreamAdmin(nc, read_only=settings.web.read_only)
        self.consumer_admin = ConsumerAdmin(lambda: self.nc, lambda: self.admin.read_only)
        self._limits: tuple[float, tuple[BatchLimits, str]] | None = None
        self._keeper: asyncio.Task[Any] | None = None
        self._reopened: list[Callable[[Connection], Awaitable[None]]] = []
        self.reopening: Callable[[str], None] = lambda why: None  # told while its connection is opened again

    @classmethod
    async def open(cls, settings: Settings, *, give_up_after: float | None = 30.0, system: bool = False,
                   **connect_overrides: Any) -> NatsSystem:
        """Connects with the settings; with system=True also as the system account user, when one is
        configured. A server that does not answer within give_up_after raises NatsUnreachableError."""
        nc = await connect(settings.connection, give_up_after=give_up_after, **connect_overrides)
        system_nc = None
        if system and (account := settings.system.connection(settings.connection)) is not None:
            try:
                system_nc = await connect(account, give_up_after=give_up_after, **connect_overrides)
            except BaseException:
                await close(nc)
                raise
        return cls(settings, nc, system_nc)

    @property
    def monitor_url(self) -> str | None:
        return self.settings.connection.monitor_url

    async def batch_limits(self) -> tuple[BatchLimits, str]:
        """The server's effective batch limits and where they were read; the defaults (and why) when
        neither the system account nor a monitor URL answers. Read again after a minute."""
        now = time.monotonic()
        if self._limits is not None and now - self._limits[0] < LIMITS_FOR:
            return self._limits[1]
        monitor_url = self.monitor_url
        if (varz := await read_varz(self.system_nc, monitor_url)) is not None:
            found = (BatchLimits.from_varz(varz[0]), f"read from {varz[1]}")
        elif self.system_nc is None and not monitor_url:
            found = (BatchLimits.from_varz({}), f"{ASSUMED}: give --monitor-url or a system "
                     "account to read the real ones")
        else:
            found = (BatchLimits.from_varz({}), f"{ASSUMED}: /varz did not answer")
        self._limits = (now, found)
        return found

    async def server_syncs(self) -> tuple[ServerSync, ...] | None:
        """Each server's fsync policy (console.domain.durability); None when no /varz could be read."""
        return await server_syncs(self.system_nc, self.monitor_url)

    def on_reopened(self, rebind: Callable[[Connection], Awaitable[None]]) -> None:
        """`rebind(the fresh connection)` once the account's connection has been opened again."""
        self._reopened.append(rebind)

    def keep_open(self) -> None:
        """A long-lived process's connections stay open whatever closed them: nats-py reconnects after
        a lost socket by itself, but a connection the server closed (a protocol error, an
        authorization change) stays closed. Each is opened again with backoff."""
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep_open(), name=f"keep-open {self.name}")

    async def _keep_open(self) -> None:
        backoff = Backoff(*REOPEN_BACKOFF)
        while True:
            await asyncio.sleep(1.0)
            for system in (False, True):
                nc = self.system_nc if system else self.nc
                if nc is None or not is_closed(nc):
                    continue
                why = why_closed(nc)
                what = "system account connection" if system else "connection"
                log.warning("NATS %s closed (%s): opening it again", what, why)

                async def reopen() -> Connection:
                    if not system:
                        self.reopening(f"opening again ({why[:80]})")
                    account = self.settings.system.connection(self.settings.connection) if system else None
                    return await connect(account or self.settings.connection, give_up_after=10.0)

                # unreachable, refused: later, with backoff
                fresh = await keep_trying(reopen, backoff, Exception, lambda e, wait: log.warning(
                    "NATS %s not opened again: %s; next try in %gs", what, e, wait))
                backoff.reset()
                if system:
                    self.system_nc = fresh
                    continue
                self.nc = fresh
                self.admin.rebind(fresh)
                for rebind in self._reopened:
                    await rebind(fresh)
                log.info("NATS connection open again")

    async def close(self) -> None:
        if self._keeper is not None:
            await cancelled(self._keeper)
        for nc in (self.nc, self.system_nc):
            await close(nc)
