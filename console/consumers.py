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
from typing import Callable

from nats.aio.subscription import Subscription

from console.broker.consumers import ConsumerAdmin, ConsumersRead, StreamSeen
from console.broker.copies import stop_reading
from console.domain.batch_ledger import BatchLedger
from console.domain.consumer_lag import STATES, Judged, Trail, judge
from console.domain.wire import Tally, printable

log = logging.getLogger(__name__)
WINDOW = timedelta(seconds=30)  # a stall is its position unmoved for this long (raised within two)
EVERY = 10.0  # seconds between two reads of the background sampler
FRESH = 2.0  # seconds a read is served again to the next asker instead of reading anew
IDLE_AFTER = 600.0  # seconds without an asker after which a web process's sampler stops
LEDGER_WAIT = 2.0  # seconds a read waits for a new BatchLedger to read up to its stream's last message


OWN = ("BATCH_CONSOLE_", "KV_BATCH_CONSOLE_")  # the console's own streams: their consumers are its parts'


def operators_streams(event_log: str) -> Choose:
    """The streams whose consumers are the operator's: the console's own (its event log, advisories,
    audit, quarantine, canaries, lease) left out, whose consumers are the console's parts."""
    return lambda names: sorted(n for n in names if not n.startswith(OWN) and n != event_log)


@dataclass
class Reading:
    """The last judgement of every consumer, and what could not be read."""

    judged: list[Judged] = field(default_factory=list)
    at: datetime | None = None
    unread: dict[str, str] = field(default_factory=dict)
    malformed: Tally = field(default_factory=Tally)
    seconds: float = 0.0  # how long the read took
    requests: int = 0


Choose = Callable[[list[str]], list[str]]  # a domain's stream names -> those whose consumers are read


def only(streams: list[str]) -> Choose:
    """These streams, whatever the domain holds (one missing is said unread)."""
    return lambda names: list(streams)


class ConsumerWatch:
    def __init__(self, admin: ConsumerAdmin, choose: Choose, system: str = "", window: timedelta = WINDOW,
                 domains: tuple[str, ...] = ()):
        self.admin, self._choose, self.system, self.window = admin, choose, system, window
        self.domains: tuple[str | None, ...] = (None, *domains)
        self.trails: dict[tuple[str, str, str], Trail] = {}  # (domain, stream, consumer) ->
        self.ledgers: dict[tuple[str, str], tuple[BatchLedger, Subscription]] = {}  # (domain, stream) ->
        self.last = Reading()
        self._lock = asyncio.Lock()
        self._read_at = 0.0
        self._asked_at = 0.0
        self._sampler: asyncio.Task[None] | None = None
        self.every = FRESH  # seconds a read is fresh enough for a checker: the sampler's period once it samples

    async def read(self, fresh_within: float = FRESH) -> Reading:
        """Every consumer now (a read of the last `fresh_within` seconds is shared)."""
        self._asked_at = time.monotonic()
        async with self._lock:
            if time.monotonic() - self._read_at < fresh_within and self.last.at is not None:
                return self.last
            began = time.perf_counter()
            found = await asyncio.gather(*(self._read_domain(d) for d in self.domains))
            self.last = self._judge(found, time.perf_counter() - began)
            self._read_at = time.monotonic()
            return self.last

    async def _read_domain(self, domain: str | None) -> tuple[str, ConsumersRead, list[StreamSeen]]:
        admin = self.admin.in_domain(domain)
        where = domain or ""
        try:
            streams = await admin.streams()
        except Exception as e:  # a leaf cut off, a reply that does not read: the other domains are read
            found = ConsumersRead()
            found.unread["(the stream list)"] = f"{type(e).__name__}: {str(e)[:200]}"
            return where, found, []
        chosen = self._choose([s.name for s in streams])
        found = await admin.read(chosen)
        read = {r.stream for r in found.consumers}
        atomic = [s for s in streams if s.atomic and s.name in read]  # read: chosen, with consumers
        await self._follow(admin, where, atomic)
        return where, found, atomic

    async def _follow(self, admin: ConsumerAdmin, where: str, atomic: list[StreamSeen]) -> None:
        """A BatchLedger for each atomic stream with consumers (and none for the rest); a new one gets up to
        LEDGER_WAIT seconds to read up to the stream's last message."""
        wanted = {s.name: s for s in atomic}
        for (domain, stream), (ledger, sub) in list(self.ledgers.items()):
            gone = stream not in wanted or wanted[stream].last_seq < ledger.through  # deleted, or made anew
            if domain == where and gone:
                await stop_reading(sub)
                del self.ledgers[domain, stream]
        new: list[tuple[BatchLedger, int]] = []
        for s in atomic:
            if (where, s.name) not in self.ledgers:
                ledger = BatchLedger()
                try:
                    self.ledgers[where, s.name] = ledger, await admin.follow_batch_ends(s.name, ledger)
                except Exception as e:  # counted again at the next read
                    log.warning("consumers: the batch ends of %s are not read: %s", printable(s.name, 100), e)
                    continue
                new.append((ledger, s.last_seq))
        deadline = time.monotonic() + LEDGER_WAIT
        while new and time.monotonic() < deadline:
            new = [(ledger, last) for ledger, last in new if not (ledger.drained or ledger.through >= last)]
            await asyncio.sleep(0.05)

    def _judge(self, domains: list[tuple[str, ConsumersRead, list[StreamSeen]]], seconds: float) -> Reading:
        reading = Reading(at=datetime.now(timezone.utc), seconds=seconds)
        seen = set()
        for where, found, _ in domains:
            for read in found.consumers:
                key = (where, *read.key)
                seen.add(key)
                trail = self.trails.setdefault(key, Trail())
                trail.add(read)
                one = judge(trail, self.window, found.next_messages.get(read.key))
                ledger = self.ledgers.get((where, read.stream))
                whole = ledger[0].count(read.ack_floor_seq) if ledger and read.filters in ((), (">",)) else None
                reading.judged.append(replace(one, system=self.system, domain=where, batches=whole))
            for gone in [k for k in self.trails if k[0] == where and k not in seen]:
                if gone[1] not in found.unread:  # deleted consumers (a stream whose list failed: read again)
                    del self.trails[gone]
            reading.unread.update({f"{where}:{k}" if where else k: v for k, v in found.unread.items()})
            reading.malformed.update(found.malformed)
            reading.requests += found.requests
        reading.judged.sort(key=lambda j: (j.domain, j.read.stream, j.read.name))
        return reading

    def sample(self, every: float = EVERY, idle_after: float | None = IDLE_AFTER) -> None:
        """Read in the background every `every` seconds (a web process: until nobody asked for `idle_after`)."""
        self.every = every
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
        await self._stop_ledgers()

    async def stop(self) -> None:
        """The sampler and the batch-end readers stopped (a later read starts them again)."""
        if self._sampler is not None:
            self._sampler.cancel()
        await self._stop_ledgers()

    async def _stop_ledgers(self) -> None:
        ledgers, self.ledgers = list(self.ledgers.values()), {}
        for _, sub in ledgers:
            await stop_reading(sub)


async def read_twice(watch: ConsumerWatch, window: float) -> Reading:
    """Two reads `window` seconds apart (the CLI's `--window`: a watch made with that window)."""
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


def batches(judged: Judged) -> str:
    """An atomic stream's consumer in batches: '12 read whole, 3 ahead' ('-': not counted)."""
    count = judged.batches
    if count is None:
        return "-"
    return f"{count.read_whole} read whole, {count.ahead}{'' if count.complete else '+'} ahead"


def text_table(reading: Reading, by_system: bool = False) -> str:
    """The CLI's table: one line per consumer, gravest first, then what could not be read (of several
    systems, each line begins with its system)."""
    rows = sorted(reading.judged, key=lambda j: (STATES.index(j.state), j.system, j.domain, j.read.stream, j.read.name))
    def system(j: Judged) -> str:
        return f"{printable(j.system, 16):<16} " if by_system else ""

    if any(j.domain for j in rows):  # a leaf's stream named DOMAIN:STREAM
        rows = [replace(j, read=replace(j.read, stream=f"{j.domain}:{j.read.stream}")) if j.domain else j for j in rows]
    head = ("SYSTEM           " if by_system else "") + f"{'STREAM':<20} {'CONSUMER':<24} {'KIND':<7} {'PENDING':>9} {'ACK_PEND':>8} {'REDELIV':>7} " \
           f"{'LAG':>9} {'STATE':<10} {'TREND':<15} CATCH UP"
    lines = [head]
    for j in rows:
        r = j.read
        lines.append(system(j) + f"{printable(r.stream, 20):<20} {printable(r.name, 24):<24} {r.kind:<7} {r.pending:>9} "
                     f"{r.ack_pending:>8} {r.redelivered:>7} {age(j.lag_seconds):>9} {j.state:<10} "
                     f"{(j.trend or '-'):<15} {age(j.catch_up_s) if j.state != 'caught_up' else '-'}"
                     + (f"  inside batch {printable(j.inside_batch, 64)} ({j.read_of_batch} read)" if j.inside_batch else "")
                     + (f"  batches: {batches(j)}" if j.batches else ""))
    lines += [f"UNREAD {printable(stream, 100)}: {printable(why, 200)}" for stream, why in sorted(reading.unread.items())]
    if reading.malformed:
        lines.append(f"LEFT OUT {sum(reading.malformed.values())} replies that did not read: "
                     + ", ".join(f"{printable(k, 80)} ({n})" for k, n in reading.malformed.most_common(3)))
    lines.append(f"{len(rows)} consumers, read in {reading.seconds:.2f} s ({reading.requests} requests)")
    return "\n".join(lines)
