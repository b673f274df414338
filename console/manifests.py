"""The loss manifests of one system, kept by the alerts part (console.domain.manifests says what one is).

It follows the event log: each lost batch's events make its manifest, which at each change (more
evidence, a publisher's report, what the stream holds) is written to the log as a MANIFEST event (its
id the manifest's and its version, so a restart writes none twice) and published, signed with the event
key, on `batch_console.manifest.<stream>`. Publishers answer on `batch_console.repair.<stream>`; a
report is only a claim: the console reads the stream back and calls a manifest repaired only when every
missing message is there once (console.broker.repair)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from datetime import datetime, timedelta, timezone

from console.broker.connection import Connection
from console.broker.eventlog import EventLog
from console.broker.copies import stop_reading
from console.broker.repair import follow_reports, publish_manifest, repaired_seqs
from console.domain.events import COLLECTOR, BatchEvent, EventKind, MalformedEvent
from console.domain.manifests import (
    EVIDENCE, READ_KINDS, REPAIR_SUBJECT, Manifest, MalformedManifest, manifest_in, manifest_of, manifests_of, parse_report,
    reopened, verdict, with_report,
)
from console.domain.wire import Tally

log = logging.getLogger(__name__)
KEEP_BATCHES = 10_000  # lost batches whose events are kept (the oldest let go first)
SINCE = timedelta(hours=24)  # how far back a keeper that starts reads the log
# how far before a manifest's time its stream is read back: the originals stored after the last ack an
# inference or a leader change could not see were sent up to a batch timeout (10 s by default) before it
READ_BACK_EXACT, READ_BACK_OPEN = timedelta(seconds=5), timedelta(seconds=30)
VERIFY_AFTER = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # seconds after a report at which the stream is read again
# A loss is called repaired only once its evidence has been still this long: some of it is said after the
# loss (a refused commit's tail, a run of 10208s) by up to two of the collector's ticks
QUIET = 3.0
NAMING = (EventKind.FAST_ATTRIBUTED, EventKind.BATCH_MESSAGES)  # more of a lost batch: its stream, its size
CATCH_UP = 2.0  # seconds without a record after which a keeper that starts has read the log's backlog


def manifest_event(manifest: Manifest, now: datetime) -> BatchEvent:
    return BatchEvent(f"manifest.{manifest.id}.{manifest.version}", EventKind.MANIFEST, now, manifest.stream,
                      manifest.batch, reason=manifest.state, detail=manifest.to_json().decode(), source=COLLECTOR,
                      domain=manifest.domain)


def read_back_from(manifest: Manifest) -> timedelta:
    return READ_BACK_EXACT if manifest.certainty == "exact" else READ_BACK_OPEN


async def read_manifests(log_: EventLog, since: datetime, until: datetime | None = None) -> list[Manifest]:
    """The manifests of the losses between two times (each kind read on its own subjects: the log's
    committed batches, most of it, are not read)."""
    until = until or datetime.now(timezone.utc)
    reads = await asyncio.gather(*(log_.window(since, until, f"{kind.value}.>", idle_timeout=0.5)
                                   for kind in READ_KINDS))
    events = sorted((pair for found in reads for pair in found), key=lambda pair: pair[0])
    return manifests_of([e for _, e in events])


class ManifestKeeper:
    def __init__(self, nc: Connection, log_: EventLog, since: timedelta = SINCE):
        self.nc, self.log, self.since = nc, log_, since
        self.events: OrderedDict[str, list[BatchEvent]] = OrderedDict()  # batch id -> its events (lost ones)
        self.manifests: dict[str, Manifest] = {}  # id -> the newest
        self.written: dict[str, int] = {}  # id -> the newest version in the log
        self.refused = Tally()  # reports and records that did not read
        self.caught_up = False
        self._checks: dict[str, asyncio.Task[None]] = {}
        self.read_back: dict[str, int] = {}  # manifest id -> times its stream was read back after a report
        self.changed_at: OrderedDict[str, float] = OrderedDict()  # manifest id -> its evidence's last change (monotonic)

    # -- the log ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: a follower that fails is started again (from SINCE: what it wrote is not written twice)."""
        await self.log.wait_until_there()
        reports = await follow_reports(self.nc, self._on_report)
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                follower = asyncio.create_task(self._follow())
                await asyncio.wait([follower, stopping], return_when=asyncio.FIRST_COMPLETED)
                if not follower.done():
                    follower.cancel()
                    break
                if not follower.cancelled() and (error := follower.exception()) is not None:
                    log.error("manifests: the event log's follower stopped (%s: %s); again in 5 s",
                              type(error).__name__, str(error)[:200])
                await asyncio.wait([stopping], timeout=5.0)
        finally:
            stopping.cancel()
            for task in self._checks.values():
                task.cancel()
            await stop_reading(reports)

    async def _follow(self) -> None:
        """The log's losses and manifests (the server sends no other kind) from SINCE, then live; caught up
        at the first record with none waiting after it, or when none comes within CATCH_UP seconds."""
        self.caught_up = False
        records = self.log.follow_kinds(datetime.now(timezone.utc) - self.since, tuple(k.value for k in READ_KINDS))
        waiting = asyncio.ensure_future(anext(records))
        try:
            while True:
                done, _ = await asyncio.wait([waiting], timeout=None if self.caught_up else CATCH_UP)
                if not done:  # nothing of these kinds in the log: caught up already
                    await self._caught_up()
                    continue
                event, pending = waiting.result()
                waiting = asyncio.ensure_future(anext(records))
                if event is not None:
                    changed = self.apply(event)
                    if self.caught_up and changed is not None:
                        await self.publish(changed)
                if not self.caught_up and pending == 0:
                    await self._caught_up()
        finally:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)  # the generator can be closed once it is let go
            await records.aclose()

    async def _caught_up(self) -> None:
        """What the log has no manifest of yet (a keeper that died before writing it): written now."""
        self.caught_up = True
        for manifest in [m for m in self.manifests.values() if self.written.get(m.id, 0) < m.version]:
            await self.publish(manifest)

    def apply(self, event: BatchEvent) -> Manifest | None:
        """One event of the log: the manifest it changes (to write and publish), or None."""
        if event.kind is EventKind.MANIFEST:
            try:
                recorded = manifest_in(event)
            except MalformedManifest as e:
                self.refused[e.reason[:100]] += 1
                return None
            self.written[recorded.id] = max(self.written.get(recorded.id, 0), recorded.version)
            if recorded.version >= self.manifests.get(recorded.id, recorded).version:
                self.manifests[recorded.id] = recorded
            return None
        batch = event.batch_id
        if not batch or not (event.kind in EVIDENCE or event.kind in NAMING and batch in self.events):
            return None
        self.events.setdefault(batch, []).append(event)
        self.events.move_to_end(batch)
        while len(self.events) > KEEP_BATCHES:
            self.events.popitem(last=False)
        derived = manifest_of(self.events[batch])
        if derived is None:
            return None
        known = self.manifests.get(derived.id)
        if known is not None and known.same_loss(derived):
            return None
        fresh = derived if known is None else reopened(known, derived)
        self.manifests[fresh.id] = fresh
        self.changed_at.pop(fresh.id, None)
        self.changed_at[fresh.id] = time.monotonic()
        if len(self.changed_at) > KEEP_BATCHES:
            self.changed_at.popitem(last=False)
        return fresh

    async def publish(self, manifest: Manifest) -> None:
        """Into the log (a duplicate id: already there), then on the manifest subject, signed."""
        now = datetime.now(timezone.utc)
        appended = await self.log.append([manifest_event(manifest, now)])
        if appended.refused:
            log.warning("manifest %s not written: %s", manifest.id, appended.refused[0][1])
            return
        self.written[manifest.id] = max(self.written.get(manifest.id, 0), manifest.version)
        try:
            await publish_manifest(self.nc, manifest, self.log.settings.key, self.log.settings.system)
        except Exception as e:  # the log holds it; a publisher that missed it reads `manifests` or the API
            log.warning("manifest %s not published: %s", manifest.id, e)

    # -- repairs ----------------------------------------------------------------------------------

    async def _on_report(self, subject: str, data: bytes) -> None:
        try:
            report = parse_report(data)
        except (MalformedManifest, MalformedEvent) as e:
            self.refused[e.reason[:100]] += 1
            return
        manifest = self.manifests.get(report.id)
        if manifest is None or subject != f"{REPAIR_SUBJECT}.{manifest.stream}":
            self.refused["a report of no manifest kept"] += 1
            return
        changed = with_report(manifest, report)
        if changed is not manifest:
            self.manifests[changed.id] = changed
            await self.publish(changed)
        if report.state == "resent" and report.id not in self._checks:
            self._checks[report.id] = asyncio.create_task(self._verify(report.id))

    async def _verify(self, manifest_id: str) -> None:
        """The stream read back after a report, at growing intervals, until every missing message is there."""
        try:
            for wait in VERIFY_AFTER:
                await asyncio.sleep(wait)
                manifest = self.manifests[manifest_id]
                try:
                    counted = await repaired_seqs(self.nc, manifest.stream, manifest.batch,
                                                  manifest.time - read_back_from(manifest), manifest.domain)
                except Exception as e:  # read again at the next interval
                    log.warning("manifest %s: the stream not read back: %s", manifest_id, e)
                    continue
                self.read_back[manifest_id] = self.read_back.get(manifest_id, 0) + 1
                judged = verdict(manifest, counted)
                if judged.state == "repaired" and time.monotonic() - self.changed_at.get(manifest_id, 0.0) < QUIET:
                    continue  # more of the loss may be on its way: judged at the next read
                if judged is not manifest:
                    self.manifests[manifest_id] = judged
                    await self.publish(judged)
                if judged.state == "repaired":
                    return
        finally:
            self._checks.pop(manifest_id, None)
