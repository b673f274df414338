"""The quarantine: a small, bounded stream of the raw inputs the console refused, with the reason.

Bad input is never retried and never blocks what comes behind it: it is counted, kept here for
an operator to look at (`nats stream view BATCH_CONSOLE_QUARANTINE`), and skipped. Keeping is
rate-limited, so a flood of garbage costs a bounded amount of storage and publishing; past the
rate the input is only counted. The newest are kept, the oldest going first; and so that a long flood
cannot push out the evidence that came before it, the first inputs of each reason are also kept apart,
in a stream that refuses new ones once full (`BATCH_CONSOLE_QUARANTINE_FIRST`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker.streams import StreamSpec, ensure_stream
from console.domain.wire import printable

log = logging.getLogger(__name__)

REASON = "Batch-Console-Reason"
SOURCE = "Batch-Console-Source"
ORIGINAL_SUBJECT = "Batch-Console-Subject"


@dataclass(frozen=True)
class QuarantineSettings:
    stream: str = "BATCH_CONSOLE_QUARANTINE"
    subject_prefix: str = "batch_console.quarantine"
    max_msgs: int = 10_000
    max_bytes: int = 64 * 1024 * 1024
    max_age: float = 7 * 86_400.0
    max_body: int = 64 * 1024  # longer inputs are kept truncated
    per_second: float = 50.0  # inputs kept per second at most; the rest are only counted
    first_stream: str = "BATCH_CONSOLE_QUARANTINE_FIRST"
    first_prefix: str = "batch_console.quarantine_first"
    first_per_reason: int = 20  # the first inputs of each reason a collector keeps apart
    first_max_msgs: int = 2_000  # then the stream refuses more: the earliest evidence stays
    max_reasons: int = 200  # reasons counted for the first inputs; past them, none is kept apart
    replicas: int | None = None  # None: 3 on a cluster of three servers or more, else 1


def _header_value(text: str, limit: int = 512) -> str:
    """Headers end at a line break: keep a reason or a subject printable and short."""
    return printable(text, limit)


class Quarantine:
    def __init__(self, nc: Client, settings: QuarantineSettings = QuarantineSettings()):
        self.nc = nc
        self.settings = settings
        self.kept = 0
        self.not_kept = 0  # over the rate, or the quarantine unavailable
        self.available = False
        self._tokens = settings.per_second
        self._refilled = time.monotonic()
        self._empty_until = 0.0  # no token before then
        self._first: dict[str, int] = {}  # reason -> inputs kept apart
        self._keeping: set[asyncio.Task[None]] = set()  # copies on their way (offer_nowait)

    async def ensure(self) -> None:
        """Create the stream if it is missing; an existing one is left as the operator set it."""
        s = self.settings
        spec = StreamSpec(s.stream, (f"{s.subject_prefix}.>",), max_msgs=s.max_msgs, max_bytes=s.max_bytes,
                          max_age=s.max_age, description="inputs the batch console refused, with the reason (bounded)",
                          replicas=s.replicas)
        first = StreamSpec(s.first_stream, (f"{s.first_prefix}.>",), max_msgs=s.first_max_msgs, max_bytes=s.max_bytes,
                           max_age=s.max_age, discard_old=False, replicas=s.replicas,
                           description="the first inputs of each reason the batch console refused (kept once full)")
        try:
            await ensure_stream(self.nc.jetstream(), spec)
            await ensure_stream(self.nc.jetstream(), first)
        except (nats.js.errors.Error, nats.errors.Error) as e:
            log.warning("no quarantine stream (%s): refused inputs are only counted", e)
            return
        self.available = True

    def _take_token(self) -> bool:
        now = time.monotonic()
        if now < self._empty_until:  # a flood past the rate: told by one comparison
            return False
        rate = self.settings.per_second
        self._tokens = min(rate, self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._tokens < 1:
            self._empty_until = now + (1 - self._tokens) / rate if rate > 0 else float("inf")
            return False
        self._tokens -= 1
        return True

    def _first_of_its_reason(self, reason: str) -> bool:
        seen = self._first.get(reason)
        if seen is None and len(self._first) >= self.settings.max_reasons:
            return False
        if (seen or 0) >= self.settings.first_per_reason:
            return False
        self._first[reason] = (seen or 0) + 1
        return True

    def admit(self, reason: str) -> tuple[bool, bool] | None:
        """Which copies of a refused input to keep (among the first of its reason, among the newest
        under the rate), or None: then it is only counted."""
        if not self.available:
            self.not_kept += 1
            return None
        first = self._first_of_its_reason(reason)
        newest = self._take_token()
        if not (first or newest):
            self.not_kept += 1
            return None
        return first, newest

    async def offer(self, source: str, reason: str, subject: str, data: bytes) -> None:
        """One refused input: kept apart when it is among the first of its reason, and among the newest
        while under the rate; otherwise only counted (fire and forget: a lost entry costs only the copy)."""
        if (copies := self.admit(reason)) is not None:
            await self._keep(copies, source, reason, subject, data)

    def offer_nowait(self, source: str, reason: str, subject: str, data: bytes) -> None:
        """offer, for a reader's hot path: what is only counted costs no await; a copy is kept by a task."""
        if (copies := self.admit(reason)) is not None:
            task = asyncio.get_running_loop().create_task(self._keep(copies, source, reason, subject, data))
            self._keeping.add(task)
            task.add_done_callback(self._keeping.discard)

    async def settled(self, within: float = 2.0) -> None:
        """The copies on their way (offer_nowait) kept, or `within` seconds gone: before a stop."""
        if self._keeping:
            await asyncio.wait(list(self._keeping), timeout=within)

    async def _keep(self, copies: tuple[bool, bool], source: str, reason: str, subject: str, data: bytes) -> None:
        first, newest = copies
        headers = {REASON: _header_value(reason), SOURCE: source, ORIGINAL_SUBJECT: _header_value(subject)}
        body = bytes(data[: self.settings.max_body])
        try:
            if first:
                await self.nc.publish(f"{self.settings.first_prefix}.{source}", body, headers=headers)
            if newest:
                await self.nc.publish(f"{self.settings.subject_prefix}.{source}", body, headers=headers)
            self.kept += 1
        except nats.errors.Error:
            self.not_kept += 1
