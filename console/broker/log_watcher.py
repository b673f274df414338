"""A watch on the event log's subjects for a synchronous loop (the analytics job's `--follow`): a core
subscription on a thread of its own, whose only output is "something that matters arrived". A wake-up
is a hint, never data: a forged publish costs the loop a run over nothing new."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from nats.aio.msg import Msg

from console.broker.connection import connect
from console.config import ConnectionSettings

log = logging.getLogger(__name__)


class LogWatcher:
    def __init__(self, connection: ConnectionSettings, subject: str, wakes: tuple[str, ...] = ()):
        """Wakes on messages on `subject` whose subject starts with one of `wakes` (none given: any)."""
        self.connection, self.subject, self.wakes = connection, subject, wakes
        self._new = threading.Event()
        self.last_arrival = 0.0  # time.monotonic() of the last message that wakes it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._watch()), name="event-log-watcher",
                                        daemon=True)

    def start(self) -> LogWatcher:
        self._thread.start()
        return self

    async def _watch(self) -> None:
        self._loop, self._done = asyncio.get_running_loop(), asyncio.Event()
        try:
            nc = await connect(self.connection, give_up_after=self.connection.connect_timeout)
        except Exception as e:  # the loop still runs every `every` seconds
            log.warning("analytics --follow: cannot watch the event log (%s); runs on the timer only", e)
            return
        await nc.subscribe(self.subject, cb=self._on_message)
        await self._done.wait()
        await nc.close()

    async def _on_message(self, msg: Msg) -> None:
        if not self.wakes or msg.subject.startswith(self.wakes):
            self.last_arrival = time.monotonic()
            self._new.set()

    def wait(self, timeout: float) -> bool:
        """Until something reaches the log (True) or `timeout` seconds pass (False)."""
        arrived = self._new.wait(timeout)
        self._new.clear()
        return arrived

    def stop(self) -> None:
        if self._thread.is_alive() and self._loop is not None and self._done is not None:
            try:
                self._loop.call_soon_threadsafe(self._done.set)
            except RuntimeError:  # its loop ended meanwhile (it could not connect)
                pass
            self._thread.join(timeout=5)


class AnyOf:
    """Several systems' watchers as one: wakes when any of their logs has news."""

    def __init__(self, watchers: list[LogWatcher]):
        self.watchers = watchers
        self._new = threading.Event()
        for watcher in watchers:
            watcher._new = self._new

    @property
    def last_arrival(self) -> float:
        return max(w.last_arrival for w in self.watchers)

    def wait(self, timeout: float) -> bool:
        arrived = self._new.wait(timeout)
        self._new.clear()
        return arrived

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
