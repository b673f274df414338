"""The audit trail's stream: records appended in a chain (each names the hash of the one before it,
and two writers never both follow the same record: the append says which record it expects last),
read back and checked (console.domain.audit)."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace
from datetime import datetime

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker.pull import ConsumerReader
from console.broker.streams import StreamSpec, ensure_stream
from console.domain.audit import GENESIS, AuditRecord, Checked, Stored, chain_hash, check
from console.domain.signing import SIGNATURE, signature

log = logging.getLogger(__name__)
STREAM = "BATCH_CONSOLE_AUDIT"
SUBJECT = "batch_console.audit"
MAX_RECORDS = 100_000  # bounded: the oldest go first
MAX_AGE = 365 * 24 * 3600.0
WRONG_LAST = 10071  # another writer appended first: follow its record instead
TRIES = 20


class AuditUnavailable(RuntimeError):
    """The record could not be stored: the action that wanted it is not taken."""


class AuditLog:
    def __init__(self, nc: Client, key: bytes, replicas: int | None = None):
        self.nc, self.key, self.replicas = nc, key, replicas
        self._ensured = False
        self._one_at_a_time = asyncio.Lock()  # a process's own writers queue; other processes' are retried

    async def ensure(self) -> None:
        if not self._ensured:
            await ensure_stream(self.nc.jetstream(), StreamSpec(STREAM, (SUBJECT,), max_msgs=MAX_RECORDS,
                                                                max_age=MAX_AGE, replicas=self.replicas,
                                                                description="who asked the console to change what"))
            self._ensured = True

    async def append(self, record: AuditRecord) -> int:
        """Store the record after the last one; its stream sequence."""
        async with self._one_at_a_time:
            return await self._append(record)

    async def _append(self, record: AuditRecord) -> int:
        await self.ensure()
        js = self.nc.jetstream()
        for attempt in range(TRIES):
            if attempt:
                await asyncio.sleep(random.uniform(0, 0.01 * attempt))  # two processes' writers drift apart
            try:
                last = await js.get_last_msg(STREAM, SUBJECT)
                after, previous = last.seq, chain_hash(last.data or b"")
            except nats.js.errors.NotFoundError:
                after, previous = 0, GENESIS
            body = replace(record, previous=previous).body()
            headers = {SIGNATURE: signature(self.key, body), "Nats-Expected-Last-Subject-Sequence": str(after)}
            try:
                return (await js.publish(SUBJECT, body, headers=headers, stream=STREAM)).seq
            except nats.js.errors.APIError as e:
                if e.err_code != WRONG_LAST:
                    raise AuditUnavailable(f"the audit stream refused the record: {e}") from None
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as e:
                raise AuditUnavailable(f"the audit stream did not answer: {e!r}") from None
        raise AuditUnavailable(f"{TRIES} other records were appended meanwhile")

    async def read(self, since: datetime | None = None) -> Checked:
        """Every record kept (from `since`), checked: signatures, the chain, holes in the sequences."""
        await self.ensure()
        info = await self.nc.jetstream().stream_info(STREAM)
        first, last = info.state.first_seq, info.state.last_seq
        stored: list[Stored] = []
        if info.state.messages:
            reader = ConsumerReader(self.nc, STREAM, start_time=since) if since else ConsumerReader(self.nc, STREAM)
            try:
                while not stored or stored[-1].seq < last:
                    result = await reader.fetch(500, expires=1.0)
                    if not result.messages:
                        break
                    stored += [Stored(m.stream_seq, m.payload, dict(m.headers)) for m in result.messages]
            finally:
                await reader.close()
        if since is not None and stored:
            first = stored[0].seq  # what came before `since` is not checked
        return check(stored, self.key, first, last)
