"""The publisher's side of a repair, and the console's check of it (console.domain.manifests).

A publisher that takes part keeps what it sent (`SentWindow`, bounded by messages and bytes) and what its
own replies said was lost (gap acks, refusals, a commit that failed). On a manifest of one of its batches
(`Repairer`), it sends again exactly the messages that are both named missing and lost by its own word,
each once, as a new atomic batch where the stream allows it (all or nothing), else one by one; every copy
carries `Nats-Msg-Id: <batch>.<seq>` (the server drops a second copy within its duplicate window) and
`Batch-Console-Repair-Of` / `-Seq`, by which the console reads them back (`repaired_seqs`). A manifest
is only a claim: a forged one (any client may publish on the subject) names a batch this publisher did
not send (ignored), one it committed (refused), or messages its replies never said were lost (not sent)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Awaitable, Callable, Mapping

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from console.broker import names
from console.broker.atomic import SERVER_MAX_MSGS, AtomicBatch
from console.broker.copies import stop_reading
from console.errors import BatchError, BatchServerError
from console.domain.manifests import (
    REPAIR_OF, REPAIR_SEQ, REPAIR_SUBJECT, SUBJECT, Manifest, MalformedManifest, RepairReport, Span, merged,
    parse_manifest,
)
from console.domain.signing import SIGNATURE, SYSTEM, forgery, signature
from console.domain.wire import Tally

log = logging.getLogger(__name__)
MSG_ID = "Nats-Msg-Id"
DUPLICATE_IN_BATCH = 10201  # an atomic batch naming a message id the stream holds: refused whole
KEEP_PUBLISHED = 100_000  # batch ids remembered past the window (so a manifest of one is "not repairable")
SETTLE_WAIT = 60.0  # seconds a manifest of a batch still being published waits for its end
READ_BACK_MAX = 1_000_000  # messages read back at most for one check
# a copy in this many waits for the server's answer: a repair of a run a full queue refused (429 10167) must not
# overrun the same queue, and is not in a hurry
REPAIR_WAIT_EVERY = 20


def message_id(batch: str, seq: int) -> str:
    return f"{batch}.{seq}"


@dataclass
class KeptBatch:
    stream: str | None
    messages: dict[int, tuple[str, bytes, dict[str, str]]] = field(default_factory=dict)
    lost: list[Span] = field(default_factory=list)  # by its publisher's own replies
    committed: bool = False  # an atomic batch whose commit was answered with a PubAck
    size: int = 0  # bytes
    resent: set[int] = field(default_factory=set)  # sent again already: never twice
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # its publisher is done with it


class SentWindow:
    """What a publisher sent, the newest batches kept whole within `max_messages` and `max_bytes`."""

    def __init__(self, max_messages: int = 10_000, max_bytes: int = 64 * 1024 * 1024):
        self.max_messages, self.max_bytes = max_messages, max_bytes
        self.batches: OrderedDict[str, KeptBatch] = OrderedDict()
        self.published: OrderedDict[str, None] = OrderedDict()  # every batch id sent, held or not
        self.messages = self.bytes = 0

    def keep(self, batch: str, seq: int, subject: str, payload: bytes, headers: Mapping[str, str] | None = None,
             stream: str | None = None) -> None:
        kept = self.batches.setdefault(batch, KeptBatch(stream))
        self.published[batch] = None
        self.published.move_to_end(batch)
        if len(self.published) > KEEP_PUBLISHED:
            self.published.popitem(last=False)
        if seq in kept.messages:
            return
        kept.messages[seq] = (subject, payload, {k: v for k, v in (headers or {}).items()
                                                 if not k.startswith("Nats-Batch-")})
        size = len(payload) + len(subject)
        kept.size += size
        self.messages, self.bytes = self.messages + 1, self.bytes + size
        while len(self.batches) > 1 and (self.messages > self.max_messages or self.bytes > self.max_bytes):
            _, gone = self.batches.popitem(last=False)
            self.messages -= len(gone.messages)
            self.bytes -= gone.size

    def lost(self, batch: str, span: Span) -> None:
        """What one of its own replies said was lost."""
        if batch in self.batches:
            self.batches[batch].lost.append(span)

    def committed(self, batch: str) -> None:
        if batch in self.batches:
            self.batches[batch].committed = True

    def settle(self, batch: str) -> None:
        """Its publisher is done with it (committed, ended, refused, abandoned): what it lost is all known."""
        if batch in self.batches:
            self.batches[batch].settled.set()


class Repairer:
    """Follows manifests; sends again what it holds of its own lost batches, once; reports on each."""

    def __init__(self, nc: Client, window: SentWindow, key: bytes | None = None, streams: tuple[str, ...] = ()):
        self.nc, self.window, self.key = nc, window, key
        self.streams = tuple(names.stream(s) for s in streams)  # none: every stream's manifests
        self.refused = Tally()  # manifests not acted on, by why
        self.reports: dict[str, RepairReport] = {}  # manifest id -> what it answered last
        self._acted: dict[str, int] = {}  # manifest id -> the version it acted on last
        self.states: dict[str, Manifest] = {}  # manifest id -> the newest the console published
        self.changed = asyncio.Event()  # set at every manifest of one of its batches
        self.heard = 0  # manifests of its batches done with (acted on or not)
        self._subs: list[Subscription] = []
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        for subject in [f"{SUBJECT}.{s}" for s in self.streams] or [f"{SUBJECT}.>"]:
            self._subs.append(await self.nc.subscribe(subject, cb=self._on_manifest))

    async def stop(self) -> None:
        for sub in self._subs:
            await stop_reading(sub)
        self._subs.clear()

    async def _on_manifest(self, msg: Msg) -> None:
        if self.key is not None and (why := forgery(self.key, msg.data, msg.headers)) is not None:
            self.refused[why] += 1
            return
        try:
            manifest = parse_manifest(msg.data)
        except MalformedManifest as e:
            self.refused[e.reason[:100]] += 1
            return
        if manifest.batch not in self.window.published or msg.subject != f"{SUBJECT}.{manifest.stream}":
            return  # another publisher's (or a forger's of one never sent here)
        known = self.states.get(manifest.id)
        if known is None or manifest.version >= known.version:
            self.states[manifest.id] = manifest
        self.changed.set()
        try:
            await self._act(manifest)
        finally:
            self.heard += 1

    async def _act(self, manifest: Manifest) -> None:
        if manifest.state != "open" or manifest.version <= self._acted.get(manifest.id, 0):
            return
        kept = self.window.batches.get(manifest.batch)
        if kept is not None:  # what its own replies lost is known once it is done with the batch
            try:
                await asyncio.wait_for(kept.settled.wait(), SETTLE_WAIT)
            except asyncio.TimeoutError:
                pass
        async with self._lock:  # one manifest at a time: a second copy finds it answered
            if manifest.version <= self._acted.get(manifest.id, 0):
                return
            self._acted[manifest.id] = manifest.version
            report = await self.repair(manifest)
            if report is not None:
                self.reports[manifest.id] = report
                await self.nc.publish(f"{REPAIR_SUBJECT}.{manifest.stream}", report.to_json())

    async def repair(self, manifest: Manifest) -> RepairReport | None:
        """Sends again what both the manifest and its own replies say was lost (and was not sent again
        before): the report of it, None when there is nothing more to say."""
        kept = self.window.batches.get(manifest.batch)
        if kept is None:
            return self._report(manifest, "not_repairable", (), f"no longer held (the window keeps "
                                f"{self.window.max_messages} messages, {self.window.max_bytes} bytes)")
        if kept.committed:
            self.refused["a manifest of a batch its commit stored"] += 1
            return self._report(manifest, "not_repairable", (), "its commit was answered with a PubAck: nothing lost")
        through = max(kept.messages, default=0)
        own = {s for span in kept.lost for s in span.seqs(through)}
        named = {s for span in manifest.missing for s in span.seqs(through)}
        wanted = sorted((own & named & set(kept.messages)) - kept.resent)
        if not wanted:
            if kept.resent:
                return None  # all of it sent again before
            self.refused["nothing named that its own replies said was lost"] += 1
            return self._report(manifest, "not_repairable", (), "its own replies say none of these was lost", through)
        kept.resent.update(wanted)  # before sending: a failure half-way is not sent again either
        try:
            await self._send_again(manifest, kept, wanted)
        except (BatchError, nats.errors.Error, asyncio.TimeoutError) as e:
            return self._report(manifest, "not_repairable", (), f"sending again failed: {str(e)[:300]}", through)
        before = len(named & own & kept.resent) - len(wanted)
        gone = len((named & own) - set(kept.messages))
        return self._report(manifest, "resent", merged(Span(s, s) for s in wanted),
                            f"{len(wanted)} message(s) sent again" + (f"; {before} sent again before" if before else "")
                            + (f"; {gone} no longer held" if gone else ""), through)

    def _report(self, manifest: Manifest, state: str, resent: tuple[Span, ...], why: str,
                through: int = 0) -> RepairReport:
        return RepairReport(manifest.id, manifest.stream, manifest.batch, state, resent, why, through)

    async def _send_again(self, manifest: Manifest, kept: KeptBatch, wanted: list[int]) -> None:
        def copy(seq: int) -> tuple[str, bytes, dict[str, str]]:
            subject, payload, headers = kept.messages[seq]
            return subject, payload, {**headers, MSG_ID: message_id(manifest.batch, seq), REPAIR_OF: manifest.batch,
                                      REPAIR_SEQ: str(seq)}

        copies = [copy(s) for s in wanted]
        if await self._atomic(manifest.stream):
            try:
                for start in range(0, len(copies), SERVER_MAX_MSGS):
                    await self._as_one_batch(copies[start:start + SERVER_MAX_MSGS])
                return
            except BatchServerError as e:
                if e.err_code != DUPLICATE_IN_BATCH:
                    raise
                # some of them are stored after all: one by one, the server dropping the copies it holds
        for subject, payload, headers in copies:
            await self.nc.request(subject, payload, timeout=5.0, headers=headers)

    async def _as_one_batch(self, copies: list[tuple[str, bytes, dict[str, str]]]) -> None:
        batch = AtomicBatch(self.nc, wait_every=REPAIR_WAIT_EVERY)
        for subject, payload, headers in copies[:-1]:
            await batch.add(subject, payload, headers)
        subject, payload, headers = copies[-1]
        await batch.commit(subject, payload, headers)

    async def _atomic(self, stream: str) -> bool:
        try:
            return bool((await self.nc.jetstream().stream_info(stream)).config.allow_atomic)
        except Exception:  # not readable: one by one, which every stream takes
            return False


async def follow_reports(nc: Client, on_report: Callable[[str, bytes], Awaitable[None]]) -> Subscription:
    """Every publisher's repair report, as (subject, body): the console's side of the protocol."""
    async def each(msg: Msg) -> None:
        await on_report(msg.subject, msg.data)

    return await nc.subscribe(f"{REPAIR_SUBJECT}.>", cb=each)


async def publish_manifest(nc: Client, manifest: Manifest, key: bytes | None, system: str | None) -> None:
    """A manifest on `batch_console.manifest.<stream>`, signed with the event key (as the log's records are)."""
    body = manifest.to_json()
    headers: dict[str, str] = {}
    if key is not None:
        headers[SIGNATURE] = signature(key, body, system)
        if system is not None:
            headers[SYSTEM] = system
    await nc.publish(f"{SUBJECT}.{names.stream(manifest.stream)}", body, headers=headers)


async def repaired_seqs(nc: Client, stream: str, batch: str, since: datetime,
                        domain: str | None = None) -> dict[int, int]:
    """How many times each batch sequence of `batch` is in the stream since `since`, read headers-only up to its
    last message: a copy by its Batch-Console-Repair headers, an original by its `Nats-Msg-Id` (`<batch>.<seq>`):
    a message after the last ack the server stored after all is there once, its copy dropped as a duplicate."""
    counted: dict[int, int] = {}
    done = asyncio.Event()
    read = 0
    original = f"{batch}."  # an original's Nats-Msg-Id, before its batch sequence

    async def each(msg: Msg) -> None:
        nonlocal read
        read += 1
        headers = msg.headers or {}
        if REPAIR_OF in headers:
            seq = headers.get(REPAIR_SEQ, "") if headers[REPAIR_OF] == batch else ""
        else:
            msg_id = headers.get(MSG_ID, "")
            seq = msg_id[len(original):] if msg_id.startswith(original) else ""
        if seq.isdigit() and len(seq) < 17:
            counted[int(seq)] = counted.get(int(seq), 0) + 1
        try:
            pending = msg.metadata.num_pending
        except (ValueError, AttributeError, TypeError, IndexError):
            pending = 1
        if pending == 0 or read >= READ_BACK_MAX:
            done.set()

    js = nc.jetstream(domain=domain)
    if (await js.stream_info(stream)).state.messages == 0:
        return counted
    sub = await js.subscribe("", stream=stream, cb=each, ordered_consumer=True, headers_only=True,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                                   opt_start_time=since.astimezone(timezone.utc)))
    try:
        await asyncio.wait_for(done.wait(), 30.0)
    except asyncio.TimeoutError:
        pass  # what was read is counted; the next check reads again
    finally:
        await stop_reading(sub)
    return counted
