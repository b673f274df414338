"""`batch-console consumers`, the Consumers page and the consumer checks: every consumer of every stream
of a system, read at once (console.broker.consumers) and judged over a window of reads
(console.domain.consumer_lag). One `ConsumerWatch` per process and system keeps the trails, so each
read of the page, the API or the alerts part judges against the reads before it; one read alone gives
the numbers and no trend (the CLI's `--window` reads twice)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Awaitable, Callable

from console.broker.consumers import ConsumerAdmin, ConsumersRead
from console.domain.consumer_lag import Judged, Trail, judge
from console.domain.wire import Tally

log = logging.getLogger(__name__)
WINDOW = timedelta(seconds=30)  # a stall is its position unmoved for this long (raised within two)
EVERY = 10.0  # seconds between two reads of the background sampler
FRESH = 2.0  # seconds a read is served again to the next asker instead of reading anew
IDLE_AFTER = 600.0  # seconds without an asker after which a web process's sampler stops


OWN = ("BATCH_CONSOLE_", "KV_BATCH_CONSOLE_")  # the console's own streams: their consumers are its parts'


def operators_streams(names: list[str], event_log: str) -> list[str]:
    """The streams whose consumers are the operator's: the console's own (its event log, advisories,
    audit, quarantine, canaries, lease) left out, whose consumers are the console's parts."""
    return sorted(n for n in names if not n.startswith(OWN) and n != event_log)


@dataclass
class Reading:
    """The last judgement of every consumer, and what could not be read."""

    judged: list[Judged] = field(default_factory=list)
    at: datetime | None = None
    unread: dict[str, str] = field(default_factory=dict)
    malformed: Tally = field(default_factory=Tally)
    seconds: float = 0.0  # how long the read took
    requests: int = 0


class ConsumerWatch:
    def __init__(self, admin: ConsumerAdmin, streams: Callable[[], Awaitable[list[str]]], system: str = "",
                 window: timedelta = WINDOW):
        self.admin, self._streams, self.system, self.window = admin, streams, system, window
        self.trails: dict[tuple[str, str], Trail] = {}
        self.last = Reading()
        self._lock = asyncio.Lock()
        self._read_at = 0.0
        self._asked_at = 0.0
        self._sampler: asyncio.Task[None] | None = None

    async def read(self, fresh_within: float = FRESH) -> Reading:
        """Every consumer now (a read of the last `fresh_within` seconds is shared)."""
        self._asked_at = time.monotonic()
        async with self._lock:
            if time.monotonic() - self._read_at < fresh_within and self.last.at is not None:
                return self.last
            began = time.perf_counter()
            found = await self.admin.read(await self._streams())
            self.last = self._judge(found, time.perf_counter() - began)
            self._read_at = time.monotonic()
            return self.last

    def _judge(self, found: ConsumersRead, seconds: float) -> Reading:
        seen = set()
        judged = []
        for read in found.consumers:
            seen.add(read.key)
            trail = self.trails.setdefault(read.key, Trail())
            trail.add(read)
            one = judge(trail, self.window, found.next_messages.get(read.key))
            judged.append(replace(one, system=self.system))
        for gone in set(self.trails) - seen:  # deleted consumers (and streams whose list failed: read again)
            if gone[0] not in found.unread:
                del self.trails[gone]
        judged.sort(key=lambda j: (j.read.stream, j.read.name))
        return Reading(judged, datetime.now(timezone.utc), dict(found.unread), found.malformed, seconds, found.requests)

    def sample(self, every: float = EVERY, idle_after: float | None = IDLE_AFTER) -> None:
        """Read in the background every `every` seconds (a web process: until nobody asked for `idle_after`)."""
        if self._sampler is None or self._sampler.done():
            self._asked_at = time.monotonic()
            self._sampler = asyncio.get_running_loop().create_task(self._sample(every, idle_after))

    async def _sample(self, every: float, idle_after: float | None) -> None:
        while idle_after is None or time.monotonic() - self._asked_at < idle_after:
            asked = self._asked_at
            try:
                await self.read(fresh_within=every / 2)
            except Exception as e:  # the server away for a while: the next read tries again
                log.warning("consumers: a read failed: %s", e)
            self._asked_at = asked  # the sampler's own reads are not an asker's
            await asyncio.sleep(every)

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()


async def read_twice(watch: ConsumerWatch, window: float) -> Reading:
    """Two reads `window` seconds apart, judged over that window (the CLI's `--window`)."""
    watch.window = timedelta(seconds=window)
    await watch.read(fresh_within=0)
    await asyncio.sleep(window)
    return await watch.read(fresh_within=0)


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def text_table(reading: Reading, by_system: bool = False) -> str:
    """The CLI's table: one line per consumer, gravest first, then what could not be read (of several
    systems, each line begins with its system)."""
    from console.domain.consumer_lag import STATES
    from console.domain.wire import printable

    rows = sorted(reading.judged, key=lambda j: (STATES.index(j.state), j.system, j.read.stream, j.read.name))
    system = (lambda j: f"{printable(j.system, 16):<16} ") if by_system else (lambda j: "")
    head = ("SYSTEM           " if by_system else "") + f"{'STREAM':<20} {'CONSUMER':<24} {'KIND':<7} {'PENDING':>9} {'ACK_PEND':>8} {'REDELIV':>7} " \
           f"{'LAG':>9} {'STATE':<10} {'TREND':<15} CATCH UP"
    lines = [head]
    for j in rows:
        r = j.read
        lines.append(system(j) + f"{printable(r.stream, 20):<20} {printable(r.name, 24):<24} {r.kind:<7} {r.pending:>9} "
                     f"{r.ack_pending:>8} {r.redelivered:>7} {age(j.lag_seconds):>9} {j.state:<10} "
                     f"{(j.trend or '-'):<15} {age(j.catch_up_s) if j.state != 'caught_up' else '-'}"
                     + (f"  inside batch {printable(j.inside_batch, 64)} ({j.read_of_batch} read)" if j.inside_batch else ""))
    lines += [f"UNREAD {printable(stream, 100)}: {printable(why, 200)}" for stream, why in sorted(reading.unread.items())]
    if reading.malformed:
        lines.append(f"LEFT OUT {sum(reading.malformed.values())} replies that did not read: "
                     + ", ".join(f"{printable(k, 80)} ({n})" for k, n in reading.malformed.most_common(3)))
    lines.append(f"{len(rows)} consumers, read in {reading.seconds:.2f} s ({reading.requests} requests)")
    return "\n".join(lines)
