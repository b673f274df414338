"""The quarantine: a small, bounded stream of the raw inputs the console refused, with the reason.

Bad input is never retried and never blocks what comes behind it: it is counted, kept here for
an operator to look at (`nats stream view BATCH_CONSOLE_QUARANTINE`), and skipped. Keeping is
rate-limited, so a flood of garbage costs a bounded amount of storage and publishing; past the
rate the input is only counted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker.streams import StreamSpec, ensure_stream

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
    replicas: int | None = None  # None: 3 on a cluster of three servers or more, else 1


def _header_value(text: str, limit: int = 512) -> str:
    """Headers end at a line break: keep a reason or a subject printable and short."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


class Quarantine:
    def __init__(self, nc: Client, settings: QuarantineSettings = QuarantineSettings()):
        self.nc = nc
        self.settings = settings
        self.kept = 0
        self.not_kept = 0  # over the rate, or the quarantine unavailable
        self.available = False
        self._tokens = settings.per_second
        self._refilled = time.monotonic()

    async def ensure(self) -> None:
        """Create the stream if it is missing; an existing one is left as the operator set it."""
        s = self.settings
        spec = StreamSpec(s.stream, (f"{s.subject_prefix}.>",), max_msgs=s.max_msgs, max_bytes=s.max_bytes,
                          max_age=s.max_age, description="inputs the batch console refused, with the reason (bounded)",
                          replicas=s.replicas)
        try:
            await ensure_stream(self.nc.jetstream(), spec)
        except (nats.js.errors.Error, nats.errors.Error) as e:
            log.warning("no quarantine stream (%s): refused inputs are only counted", e)
            return
        self.available = True

    def _take_token(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.settings.per_second, self._tokens + (now - self._refilled) * self.settings.per_second)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def has_room(self) -> bool:
        """Whether keep() would keep an input now; past the rate, the input is only counted."""
        if self.available and self._take_token():
            return True
        self.not_kept += 1
        return False

    async def keep(self, source: str, reason: str, subject: str, data: bytes) -> None:
        """Keep one refused input; call after has_room() (fire and forget: a lost entry costs only the copy)."""
        headers = {REASON: _header_value(reason), SOURCE: source, ORIGINAL_SUBJECT: _header_value(subject)}
        try:
            await self.nc.publish(f"{self.settings.subject_prefix}.{source}", bytes(data[: self.settings.max_body]),
                                  headers=headers)
            self.kept += 1
        except nats.errors.Error:
            self.not_kept += 1
