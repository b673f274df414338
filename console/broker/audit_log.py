"""The audit trail's stream: records appended in a chain (each names the hash of the one before it,
and two writers never both follow the same record: the append says which record it expects last),
read back and checked (console.domain.audit), against the head kept outside the stream."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import replace
from datetime import datetime
from typing import Protocol

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from console.broker.pull import ConsumerReader
from console.broker.streams import StreamSpec, ensure_stream
from console.domain.audit import GENESIS, KEPT, AuditRecord, Checked, Head, Stored, chain_hash, check, erased_against
from console.domain.signing import SIGNATURE, signature

log = logging.getLogger(__name__)
STREAM = "BATCH_CONSOLE_AUDIT"
SUBJECT = "batch_console.audit"
WRONG_LAST = 10071  # another writer appended first: follow its record instead
STREAM_NOT_FOUND = 10059
TRIES = 20
READ_AT_MOST = 30.0  # seconds a read of the trail waits for the records the stream says it holds
SAFE = {"deny_delete": True, "deny_purge": True, "max_msgs": KEPT, "max_age": 0.0}  # what an existing trail is set to


class AuditUnavailable(RuntimeError):
    """The record could not be stored: the action that wanted it is not taken."""


async def _hash_at(js: JetStreamContext, seq: int) -> str | None:
    """The chain hash of the trail's record at `seq`, or None when there is none."""
    try:
        return chain_hash((await js.get_msg(STREAM, seq)).data or b"")
    except nats.js.errors.NotFoundError:
        return None


class Checkpoint(Protocol):
    """Where the head of the chain is kept outside the stream (console.storage.audit_checkpoint)."""

    def head(self) -> Head | None: ...
    def advance(self, seq: int, hash: str, restart: bool = False) -> None: ...
    def erased(self, what: str) -> None: ...
    def erasures(self) -> list[tuple[datetime, str]]: ...


class Witness:
    """The trail's head as the collector follows it, for its signed status: it moves only to a record
    that follows the one it held (that one still there, the same); after a purge, a deletion or a
    rewrite it keeps the head it saw, which the readers then hold the trail against."""

    def __init__(self) -> None:
        self.seq, self.hash = 0, ""

    async def observe(self, nc: Client) -> tuple[int, str]:
        js = nc.jetstream(timeout=2.0)
        try:
            last = await js.get_last_msg(STREAM, SUBJECT)
            seq, hash_ = last.seq or 0, chain_hash(last.data or b"")
            follows = self.seq == 0 or (seq == self.seq and hash_ == self.hash) or (
                seq > self.seq and await _hash_at(js, self.seq) == self.hash)
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
            return self.seq, self.hash  # none yet, gone, or not answering: what was seen stays
        if follows:
            self.seq, self.hash = seq, hash_
        return self.seq, self.hash


class AuditLog:
    def __init__(self, nc: Client, key: bytes, replicas: int | None = None, checkpoint: Checkpoint | None = None):
        self.nc, self.key, self.replicas, self.checkpoint = nc, key, replicas, checkpoint
        self._ensured = False
        self.unsafe: str | None = None  # why the trail's stream can still be erased quietly, when it can
        self._one_at_a_time = asyncio.Lock()  # a process's own writers queue; other processes' are retried

    async def ensure(self) -> None:
        """The trail's stream, made when missing (again, when it was deleted) with deletes and purges
        denied and no age limit; an existing one is set so, or said to be unsafe."""
        if self._ensured:
            return
        js = self.nc.jetstream()
        ensured = await ensure_stream(js, StreamSpec(STREAM, (SUBJECT,), max_msgs=KEPT, replicas=self.replicas,
                                                     deny_delete=True, deny_purge=True,
                                                     description="who asked the console to change what"))
        config = ensured.config
        wrong = {k: getattr(config, k) for k, v in SAFE.items() if (getattr(config, k) or 0) != v}
        if wrong:
            for k, v in SAFE.items():
                setattr(config, k, v)
            try:
                await js.update_stream(config)
                wrong = {}
            except nats.js.errors.APIError as e:
                log.error("the audit trail's stream %s could not be made safe (%s): %s", STREAM, wrong, e)
        self.unsafe = (f"the trail's stream has {', '.join(f'{k}={v}' for k, v in wrong.items())}: any client of "
                       "the account can erase records (the console could not change it)") if wrong else None
        self._ensured = True

    async def append(self, record: AuditRecord) -> int:
        """Store the record after the last one; its stream sequence. AuditUnavailable for any failure."""
        async with self._one_at_a_time:
            try:
                return await self._append(record)
            except AuditUnavailable:
                self._ensured = False  # a deleted stream is made again at the next record
                raise
            except (nats.errors.Error, asyncio.TimeoutError, OSError) as e:
                self._ensured = False
                raise AuditUnavailable(f"the audit stream did not take the record: {e!r}"[:300]) from None

    async def _append(self, record: AuditRecord) -> int:
        await self.ensure()
        js = self.nc.jetstream()
        for attempt in range(TRIES):
            if attempt:
                await asyncio.sleep(random.uniform(0, 0.01 * attempt))  # two processes' writers drift apart
            # The checkpoint before the stream: another process's record between the two reads would be a
            # checkpoint past the last record read, and said erased (a false alarm, kept for good)
            head = self.checkpoint.head() if self.checkpoint is not None else None
            try:
                last = await js.get_last_msg(STREAM, SUBJECT)
                after, previous = last.seq or 0, chain_hash(last.data or b"")
            except nats.js.errors.NotFoundError as e:
                if e.err_code == STREAM_NOT_FOUND:  # deleted: made again, the record goes in (the erasure is
                    self._ensured = False  # found against the checkpoint and the collector's witness)
                    await self.ensure()
                    continue
                after, previous = 0, GENESIS
            restart = await self._erased_before(head, after, previous)
            body = replace(record, previous=previous).body()
            headers = {SIGNATURE: signature(self.key, body), "Nats-Expected-Last-Subject-Sequence": str(after)}
            try:
                seq = (await js.publish(SUBJECT, body, headers=headers, stream=STREAM)).seq
            except nats.js.errors.APIError as e:
                if e.err_code != WRONG_LAST:
                    raise AuditUnavailable(f"the audit stream refused the record: {e}") from None
                continue
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError) as e:
                raise AuditUnavailable(f"the audit stream did not answer: {e!r}") from None
            if self.checkpoint is not None:
                self.checkpoint.advance(seq, chain_hash(body), restart)
            return seq
        raise AuditUnavailable(f"{TRIES} other records were appended meanwhile")

    async def _against(self, head: Head, last_seq: int, known: str | None = None) -> str | None:
        """What the trail lost that `head` says was written, or None; `known`: the hash at head.seq, when
        it was read already."""
        if known is None and head.seq <= last_seq:
            known = await _hash_at(self.nc.jetstream(), head.seq)
        return erased_against(head, last_seq, known)

    async def _erased_before(self, head: Head | None, last_seq: int, last_hash: str) -> bool:
        """Whether the trail lost records the checkpoint (`head`, read before the stream) says were written
        (kept as an erasure): the next record then starts the head again."""
        if head is None or self.checkpoint is None:
            return False
        why = await self._against(head, last_seq, last_hash if head.seq == last_seq else None)
        if why is not None:
            log.error("the audit trail was erased: %s", why)
            self.checkpoint.erased(why)
        return why is not None

    async def read(self, since: datetime | None = None, witnessed: Head | None = None) -> Checked:
        """Every record kept (from `since`), checked: signatures, the chain, holes in the sequences, and
        against the checkpoint and the collector's `witnessed` head what was erased (each erasure kept:
        new records never hide it)."""
        await self.ensure()
        head = self.checkpoint.head() if self.checkpoint is not None else None  # before the stream, as in _append
        try:
            info = await self.nc.jetstream().stream_info(STREAM)
        except nats.js.errors.NotFoundError:  # deleted since this process made it: made again, found erased
            self._ensured = False
            await self.ensure()
            info = await self.nc.jetstream().stream_info(STREAM)
        first, last = info.state.first_seq, info.state.last_seq
        stored: list[Stored] = []
        if info.state.messages:
            reader = ConsumerReader(self.nc, STREAM, start_time=since) if since else ConsumerReader(self.nc, STREAM)
            deadline = time.monotonic() + READ_AT_MOST
            try:
                while not stored or stored[-1].seq < last:
                    result = await reader.fetch(500, expires=1.0)
                    if not result.messages:  # the server holds up to `last`: an empty answer is a slow one
                        if time.monotonic() > deadline:  # (a loaded host read a whole trail as truncated)
                            break
                        continue
                    stored += [Stored(m.stream_seq, m.payload, dict(m.headers)) for m in result.messages]
            finally:
                await reader.close()
        read_from = stored[0].seq if since is not None and stored else None  # before `since`: not checked
        if since is not None and not stored:
            read_from = last + 1
        checked = check(stored, self.key, first, last, head, read_from)
        seen = next((chain_hash(item.body) for item in stored if witnessed and item.seq == witnessed.seq), None)
        if witnessed is not None and witnessed.seq and (why := await self._against(witnessed, last, seen)) \
                and not any(why in said for _, said in checked.breaks):
            checked = replace(checked, breaks=[*checked.breaks, (0, f"{why} (the collector's signed status saw "
                                                                    f"record {witnessed.seq})")])
        if self.checkpoint is None:
            return checked
        for _, why in checked.breaks:
            if "erased" in why:
                self.checkpoint.erased(why)
        known = {why for _, why in checked.breaks}
        kept = [(0, f"{why} (found {found:%Y-%m-%d %H:%M} UTC)") for found, why in self.checkpoint.erasures()
                if why not in known]
        return Checked(checked.records, kept + checked.breaks, head.written if head else 0, self.unsafe,
                       aged_out=checked.aged_out)
