"""Delivering a notice: a webhook POST of its JSON, or the same JSON on a NATS subject. Each target
is retried with backoff; every attempt is kept (bounded) for the Alerts page and logged."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from console.broker.connection import Connection
from console.domain.alerting import Notice

log = logging.getLogger(__name__)

BACKOFF = (1.0, 2.0, 4.0, 8.0)  # seconds before each retry
TIMEOUT = 5.0


@dataclass(frozen=True)
class Attempt:
    time: datetime
    rule: str
    stream: str
    status: str  # the notice's: firing | resolved
    target: str
    ok: bool
    answer: str  # the receiver's answer (HTTP status and the start of its body), or the error


class Notifier:
    def __init__(self, nc: Connection, console_url: str | None = None, keep: int = 500,
                 on_attempt: Callable[[Attempt], None] | None = None):
        self.nc = nc
        self.console_url = console_url.rstrip("/") if console_url else None
        self.attempts: deque[Attempt] = deque(maxlen=keep)
        self.on_attempt = on_attempt  # told of each attempt as it ends

    def link(self, notice: Notice) -> str | None:
        if not self.console_url:
            return None
        if notice.batch_ids:
            return f"{self.console_url}/incident?batch={urllib.request.quote(notice.batch_ids[0], safe='')}"
        return f"{self.console_url}/"

    async def send(self, notice: Notice) -> None:
        body = json.dumps(notice.to_json(self.link(notice))).encode()
        await asyncio.gather(*(self._deliver(notice, target, body) for target in notice.notify))

    async def _deliver(self, notice: Notice, target: str, body: bytes) -> None:
        for attempt, pause in enumerate((0.0, *BACKOFF)):
            await asyncio.sleep(pause)
            ok, answer = await self._once(target, body)
            tried = Attempt(datetime.now(timezone.utc), notice.rule, notice.stream, notice.status, target, ok, answer)
            self.attempts.append(tried)
            if self.on_attempt is not None:
                self.on_attempt(tried)
            (log.info if ok else log.warning)("%s %s for %s to %s: %s (attempt %d)", notice.rule, notice.status,
                                               notice.stream, target, answer, attempt + 1)
            if ok:
                return

    async def _once(self, target: str, body: bytes) -> tuple[bool, str]:
        kind, _, where = target.partition(":")
        if kind == "nats":
            try:
                await self.nc.publish(where, body, headers={"Content-Type": "application/json"})
                await self.nc.flush(timeout=TIMEOUT)
                return True, "published"
            except Exception as e:  # reconnecting, timeout: retried
                return False, f"{type(e).__name__}: {e}"[:300]
        return await asyncio.to_thread(_post, where, body)


def _post(url: str, body: bytes) -> tuple[bool, str]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
            return 200 <= reply.status < 300, f"HTTP {reply.status}"
    except urllib.error.HTTPError as e:
        return False, f"HTTP {e.code}: {e.read(200).decode(errors='replace')}"
    except (OSError, ValueError) as e:
        return False, f"{type(e).__name__}: {e}"[:300]
