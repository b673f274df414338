"""Every NATS system a web process shows: one runtime per system of the systems file (or the one
system of the settings), each opened on its own and kept open. A system that answers slowly or not
at all is tried again in the background and said on every page; it delays no other system's page."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Callable

from console.backoff import Backoff, keep_trying
from console.config import Settings
from console.domain.systems import DEFAULT
from console.errors import NatsUnreachableError
from console.runtime import Runtime
from console.services.roles import RolesWatch

if TYPE_CHECKING:  # pandas and sqlmodel load only where alerts are read
    from console.alerting.view import AlertsAcross

log = logging.getLogger(__name__)
RETRY = (1.0, 30.0)  # seconds before trying an unreachable system again: first, most
MAX_SYSTEM_ARG = 64  # a longer ?system= is no system's name (the file's names are shorter)


class Fleet:
    def __init__(self, settings: Settings):
        """The systems of the settings' systems file (ConfigError with its line), or its one system."""
        specs = settings.systems()
        self.settings = settings
        self._settings = {s.name: settings.of_system(s) for s in specs} or {DEFAULT: settings}
        self.names = list(self._settings)
        self._runtimes: dict[str, Runtime] = {}
        self.unreached: dict[str, str] = {name: "connecting" for name in self.names}  # name -> why not open
        self._tasks: list[asyncio.Task[None]] = []
        self.roles = RolesWatch(settings.access)  # one file for every system: sign-in reads it before any is open

    @property
    def several(self) -> bool:
        return len(self.names) > 1

    @property
    def read_only(self) -> bool:
        return self.settings.web.read_only

    async def open(self, prepare: Callable[[Runtime], Awaitable[None] | None], first_wait: float = 10.0) -> None:
        """Opens every system, each `prepare`d once open (a ConfigError there stops the process). One
        system alone is opened before anything is served, as a single console always was; of several,
        those that answer within `first_wait` are, and the others are tried again in the background."""
        if not self.several:
            self._runtimes[self.names[0]] = await self._open(self.names[0], prepare)
            self.unreached.clear()
            return
        self._tasks = [asyncio.create_task(self._keep_trying(name, prepare), name=f"open system {name}")
                       for name in self.names]
        done, _ = await asyncio.wait(self._tasks, timeout=first_wait)
        for task in done:
            task.result()  # a broken masking or roles file stops the start, with its line

    async def _open(self, name: str, prepare: Callable[[Runtime], Awaitable[None] | None]) -> Runtime:
        settings = self._settings[name]
        runtime = await Runtime.open(settings, follow_without_key=True,
                                     give_up_after=settings.connection.connect_timeout if self.several else 30.0)
        try:
            if (prepared := prepare(runtime)) is not None:
                await prepared
        except BaseException:
            await runtime.close()
            raise
        return runtime

    async def _keep_trying(self, name: str, prepare: Callable[[Runtime], Awaitable[None] | None]) -> None:
        def unreached(e: Exception, wait: float) -> None:
            self.unreached[name] = str(e)[:300]
            log.warning("system %s: not reachable (%s): trying again in %gs; the others are shown meanwhile",
                        name, e, wait)

        self._runtimes[name] = await keep_trying(lambda: self._open(name, prepare), Backoff(*RETRY),
                                                 NatsUnreachableError, unreached)
        self.unreached.pop(name, None)
        log.info("system %s: open", name)

    def runtime(self, name: str | None = None) -> Runtime | None:
        """The named system's runtime (None: not open yet); without a name, the first one open."""
        if name is None:
            return next((self._runtimes[n] for n in self.names if n in self._runtimes), None)
        return self._runtimes.get(name)

    def runtimes(self) -> dict[str, Runtime]:
        """The systems open now, in the file's order."""
        return {n: self._runtimes[n] for n in self.names if n in self._runtimes}

    def alerts(self) -> AlertsAcross:
        """The systems open now's alerts as one view (console.alerting.view)."""
        from console.alerting.view import AlertsAcross

        return AlertsAcross({name: runtime.alerts for name, runtime in self.runtimes().items()})

    def known(self, arg: str) -> str | None:
        """A system the URL names, when it is one of these (hostile: anything else is no system)."""
        return arg if len(arg) <= MAX_SYSTEM_ARG and arg in self._settings else None

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for runtime in self._runtimes.values():
            await runtime.close()
