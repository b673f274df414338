"""Advisories into the intake: durably from the advisory stream (acked only once the event log has
their events), live from the system account (which no client of the application account can forge)
and live from the account, where that is the only copy that can come."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import replace
from datetime import timedelta
from typing import Awaitable, Callable

from console.broker.capture import ABANDONED_SUBJECTS, ADVISORY_SUBJECTS, DurableAdvisories, Inbound, Subscriptions
from console.broker.connection import Connection, is_connected
from console.collector.health import Loops
from console.collector.intake import Intake
from console.collector.state import now
from console.collector.writer import EventWriter, survive
from console.config import CollectorSettings
from console.domain.advisory_events import IgnoredAdvisory, advisory_to_event
from console.domain.events import ACCOUNT_ADVISORY, SYSTEM_ADVISORY, BatchEvent, EventKind
from console.domain.node_stops import SUBJECTS as STOP_SUBJECTS, node_stopped
from console.domain.wire import MalformedInput, Tally
from console.errors import CaptureRefusedError

log = logging.getLogger(__name__)

# Seconds an account-side abandonment waits for the system account's copy (they arrive together).
VERIFY_WAIT = 2.0
# How far ahead of this clock an advisory's timestamp may be (clock drift between hosts); later is forged.
FUTURE_SKEW = timedelta(minutes=5)
SYSTEM_IDS = 10_000  # ids of the system account's advisories remembered
DOMAIN_RETRY = 2.0  # seconds between two tries to open a leaf domain's advisory stream


class AdvisoryReader:
    def __init__(self, nc: Connection, system_nc: Connection | None, settings: CollectorSettings, replicas: int | None,
                 own_streams: frozenset[str], intake: Intake, writer: EventWriter, loops: Loops, errors: Tally,
                 stopping: Callable[[], bool]):
        self.nc, self.system_nc, self.settings = nc, system_nc, settings
        self.intake, self.writer, self.loops, self.errors, self.stopping = intake, writer, loops, errors, stopping
        self.advisories = DurableAdvisories(nc, settings.advisory_stream, settings.durable, settings.advisory_max_age,
                                            settings.ack_wait, replicas)
        self._own_streams = own_streams  # the console's own readers' consumers: no context for a batch
        self._from_system: dict[str, None] = {}  # ids of advisories the system account sent (bounded, ordered)
        self.durable = False
        self.stream: str | None = None  # the advisory stream, once open
        self.problem: str | None = None  # why advisories are live-only
        self.domain_problems: dict[str, str] = {}  # leaf domains whose advisory stream is not open (yet), and why
        # The collector's own account, once known: the system account sends every account's copies, and
        # each account of a system has a collector of its own (a systems file's [[system.account]])
        self.account: str | None = None
        # In a supercluster: the cluster a stream is placed in (Collector.start), for each abandonment
        self.cluster_of: Callable[[str], Awaitable[str | None]] | None = None

    async def start(self, subs: Subscriptions) -> list[asyncio.Task[None]]:
        """Subscribes; the durable loops' tasks: this JetStream's, when the advisory stream could be opened,
        and each leaf domain's (which opens its own when the leaf can be reached)."""
        tasks = [self.loops.start(f"advisories@{domain}", functools.partial(self._domain_loop, domain), self.stopping)
                 for domain in self.settings.domains]
        try:
            self.stream = await self.advisories.open()
            self.durable = True
            tasks.append(self.loops.start("advisories", lambda: self._read(self.advisories, "advisories"),
                                          self.stopping))
            # Abandonments live as well: while the advisory stream has no leader (its node lost, say)
            # the server stores none, and only a subscriber hears them. Both copies carry one id.
            await subs.follow(self.nc, ABANDONED_SUBJECTS, self._on_account_live_abandonment)
        except CaptureRefusedError as e:
            self.problem = f"advisories are live-only (not durable): cannot capture them in a stream: {e}"
            log.warning(self.problem)
            await subs.follow(self.nc, ADVISORY_SUBJECTS, self._on_account_live_advisory)
        if self.system_nc is not None:
            await subs.follow(self.system_nc, ADVISORY_SUBJECTS, self._on_system_advisory)
            for subject in STOP_SUBJECTS:  # a server entering lame duck mode or shutting down (BATCH_034)
                await subs.follow(self.system_nc, subject, self._on_server_stop)
        return tasks

    async def lag(self) -> int | None:
        if not self.stream:
            return None
        try:
            return await self.advisories.pending()
        except Exception as e:  # the status goes out without the lag rather than not at all
            self.errors.add(f"consumer info: {type(e).__name__}")
            return None

    async def _domain_loop(self, domain: str) -> None:
        """A leaf's domain: its advisories kept by a stream there (the leaf's own, which it keeps while cut
        off from here), read whenever the leaf can be reached; the stream opened once it can be. Whatever
        both this JetStream's stream and the leaf's hold comes twice: one id, one event in the log."""
        name = f"advisories@{domain}"
        source = DurableAdvisories(self.nc, self.settings.advisory_stream, self.settings.durable,
                                   self.settings.advisory_max_age, self.settings.ack_wait, None, domain=domain)
        while not self.stopping():
            self.loops.beat(name)
            try:
                await source.open()
                break
            except CaptureRefusedError as e:
                if domain not in self.domain_problems:
                    log.warning("domain %s: advisories not captured there (yet): %s", domain, e)
                self.domain_problems[domain] = f"domain {domain}: advisories not captured there (yet): {e}"[:300]
                await asyncio.sleep(DOMAIN_RETRY)
        if self.domain_problems.pop(domain, None) is not None:
            log.info("domain %s: advisories captured there", domain)
        await self._read(source, name, pause=DOMAIN_RETRY)  # a leaf cut off: asked again at this pace

    async def _read(self, source: DurableAdvisories, name: str, pause: float = 0.2) -> None:
        while not self.stopping():
            try:
                fetched = await source.fetch(self.settings.fetch_batch, timeout=1.0)
            except Exception as e:  # reconnecting, or anything else: never stop collecting
                await survive(self.errors, f"{name} fetch", e, pause)
                continue
            self.loops.beat(name)
            if not fetched:
                continue
            events = [event for msg, _ in fetched if (event := await self.event(msg)) is not None]
            self.intake.state.learn(events)
            if not await self.writer.store(await self._placed(await self._account_side(events))):
                continue  # a stop gave up on the log: unacked, they are redelivered to the next run
            for _, ack in fetched:  # only now: the events are in the log
                try:
                    await ack()
                except Exception as e:  # unacked: redelivered after ack_wait, deduplicated by id
                    await survive(self.errors, "advisory ack", e)

    async def event(self, msg: Inbound) -> BatchEvent | None:
        """The advisory's event, or None with the reason counted (and bad input quarantined)."""
        try:
            event = advisory_to_event(msg.data)
            if event.kind is EventKind.CONTEXT and event.stream in self._own_streams:
                # Kept, they would wake `analytics --follow`, whose reads make more of them.
                raise IgnoredAdvisory("the console's own streams")
            if event.time > now() + FUTURE_SKEW:  # no server sent this: it would skew every time window
                raise MalformedInput(f"timestamp in the future ({event.time:%Y-%m-%d %H:%M:%S}Z)")
            return event
        except MalformedInput as e:
            self.intake.reject("advisory", e.reason, msg)
        except IgnoredAdvisory as e:
            self.intake.ignored.add(e.kind)
        except Exception as e:  # a bug meeting odd input: the input is skipped, never the loop
            log.exception("advisory not readable")
            self.intake.reject("advisory", f"unreadable ({type(e).__name__})", msg)
        return None

    async def _on_system_advisory(self, msg: Inbound) -> None:
        if (event := await self.event(msg)) is not None:
            if self.account is not None and event.account is not None and event.account != self.account:
                self.intake.ignored.add("another account's")  # that account's collector keeps it
                return
            self._from_system[event.event_id] = None
            while len(self._from_system) > SYSTEM_IDS:
                self._from_system.pop(next(iter(self._from_system)))
            self.intake.put(await self._placed([event]), SYSTEM_ADVISORY)

    async def _on_server_stop(self, msg: Inbound) -> None:
        try:
            event = node_stopped(msg.subject, msg.data)
            if event.time > now() + FUTURE_SKEW:
                raise MalformedInput(f"timestamp in the future ({event.time:%Y-%m-%d %H:%M:%S}Z)")
        except MalformedInput as e:
            self.intake.reject("server stop notice", e.reason, msg)
            return
        self.intake.put([event], SYSTEM_ADVISORY)

    async def _placed(self, events: list[BatchEvent]) -> list[BatchEvent]:
        """In a supercluster, each abandonment with the cluster its stream is placed in."""
        if self.cluster_of is None:
            return events
        return [replace(e, cluster=await self.cluster_of(e.stream)) if e.kind is EventKind.ATOMIC_ABANDONED
                and e.stream else e for e in events]

    async def _on_account_live_abandonment(self, msg: Inbound) -> None:
        """The account's live copy, beside the stream's: stored only where no other copy may come (with
        system access, the system account's live copy is the one, unless its connection is down)."""
        if self.system_nc is not None and is_connected(self.system_nc):
            return
        try:  # bad input is counted and quarantined once, from the stream's copy
            event = advisory_to_event(msg.data)
        except Exception:  # malformed, ignored, or a bug meeting odd input: the stream's copy says so
            return
        if event.time <= now() + FUTURE_SKEW:
            self.intake.put([replace(event, unverified=self.system_nc is not None)], ACCOUNT_ADVISORY)

    async def _on_account_live_advisory(self, msg: Inbound) -> None:
        if (event := await self.event(msg)) is not None:
            self.intake.put([event], ACCOUNT_ADVISORY)

    async def _account_side(self, events: list[BatchEvent]) -> list[BatchEvent]:
        """The account's copies, from the advisory stream. With system access, an abandonment the
        system account has not sent within VERIFY_WAIT is kept, marked unverified; one it has sent
        is already stored from there."""
        events = [replace(e, source=ACCOUNT_ADVISORY) for e in events]
        if self.system_nc is None:
            return events

        def pending() -> set[str]:
            return {e.event_id for e in events
                    if e.kind is EventKind.ATOMIC_ABANDONED and e.event_id not in self._from_system}

        deadline = time.monotonic() + VERIFY_WAIT
        while pending() and time.monotonic() < deadline and not self.stopping():
            await asyncio.sleep(0.05)
        unverified = pending()  # what the system account sent is stored from there: skipped here
        return [replace(e, unverified=e.event_id in unverified) for e in events if e.event_id not in self._from_system]
