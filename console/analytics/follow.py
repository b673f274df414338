"""`analytics --follow`: one warm Spark session that runs as soon as new events reach the event log.

A core subscription on the log's subjects, on a thread of its own (the job's loop is synchronous),
wakes the loop. A wake-up is only a hint: every run pins its range from the stored offset and the
log's last sequence, so a forged publish on those subjects costs at most an empty run, a missed one
is caught by the next `every`, and exactly-once is the job's as in any run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable

from console.broker.connection import connect
from console.config import ConnectionSettings

log = logging.getLogger(__name__)

# A timed run finding only the collector's heartbeat leaves it to the next run, up to this many
# sequences (at one heartbeat each 5 s, over an hour of an idle log): an idle log costs no Spark job.
HEARTBEATS_DEFERRED = 1_000


class LogWatcher:
    def __init__(self, connection: ConnectionSettings, subject: str, quiet: tuple[str, ...] = ()):
        """Wakes on messages on `subject`, except those whose subject starts with one of `quiet`."""
        self.connection, self.subject, self.quiet = connection, subject, quiet
        self._new = threading.Event()
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

    async def _on_message(self, msg) -> None:
        if not msg.subject.startswith(self.quiet):
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


def follow(run: Callable[[], None], watcher: LogWatcher, every: float, gap: float) -> None:
    """Run, then again as soon as events arrive but no sooner than `gap` seconds after the last run
    began (a burst is one run; History trails Live by about `gap` plus a run), and at least every
    `every` seconds. Until interrupted."""
    while True:
        began = time.monotonic()
        run()
        if watcher.wait(every):
            time.sleep(max(0.0, gap - (time.monotonic() - began)))
