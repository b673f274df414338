"""Refusals of callers without a valid token, as the audit trail keeps them: counted, and written as one
record a minute at most. Anyone who reaches the port can be refused as often as they like (586 a second
were seen): a record each would push the trail's real records out of its limit, and an action's record is
what the trail is for. The first refusal of a quiet minute is written at once, so a mistake is seen; the
rest of that minute is written when it ends, as counts by address and reason (the busiest ADDRESSES_SAID,
the others as one count)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from console.domain.audit import Actor

log = logging.getLogger(__name__)
WINDOW = 60.0  # seconds a summary counts over
ADDRESSES_SAID = 20  # addresses named in a summary, the busiest first
MOST_TRACKED = 10_000  # addresses counted in one window; the rest are counted as "others"
MAX_TEXT = 200  # of an address, an agent or a reason kept


@dataclass
class _Window:
    started: float
    by_address: Counter[str] = field(default_factory=Counter)
    by_who: Counter[str] = field(default_factory=Counter)  # "api (no token)", "token:NAME" (revoked, expired)
    by_action: Counter[str] = field(default_factory=Counter)  # "api GET", "mcp"
    reasons: Counter[str] = field(default_factory=Counter)
    others: int = 0
    total: int = 0


# (actor, action, target, detail): how a refusal's record is written (console.api.callers: the first system's trail)
Write = Callable[[Actor, str, str, str], Awaitable[None]]


class Refusals:
    """Refusals of unauthenticated callers, into `write(actor, action, target, detail)` at most once a
    `window` after the first (which is written at once)."""

    def __init__(self, write: Write, window: float = WINDOW):
        self._write, self.window = write, window
        self._current: _Window | None = None
        self._flusher: asyncio.Task[None] | None = None

    async def refused(self, actor: Actor, action: str, target: str, why: str) -> None:
        now = time.monotonic()
        current = self._current
        if current is not None and now - current.started >= self.window:
            await self.flush()
            current = None
        if current is None:  # a quiet minute's first refusal: written now, as it was
            self._current = _Window(now)
            self._schedule()
            await self._write(actor, action, target, why[:MAX_TEXT])
            return
        if not _counted(current.by_address, actor.address or "-", MOST_TRACKED):
            current.others += 1
        _counted(current.reasons, why, ADDRESSES_SAID)
        _counted(current.by_who, actor.user, ADDRESSES_SAID)
        _counted(current.by_action, action, ADDRESSES_SAID)
        current.total += 1

    def _schedule(self) -> None:
        async def later() -> None:
            await asyncio.sleep(self.window)
            self._flusher = None  # flush() leaves this task be
            await self.flush()

        if self._flusher is None:
            self._flusher = asyncio.ensure_future(later())

    async def flush(self) -> None:
        """The window's refusals after its first, as one record (none when there were none)."""
        if self._flusher is not None and self._flusher is not asyncio.current_task():
            self._flusher.cancel()
        self._flusher = None
        current, self._current = self._current, None
        if current is None or not current.total:
            return
        named = current.by_address.most_common(ADDRESSES_SAID)
        others = current.others + sum(current.by_address.values()) - sum(n for _, n in named)
        detail = {"refusals": current.total, "seconds": round(self.window),
                  "by_address": dict(named), "other_addresses": others, "by_who": dict(current.by_who),
                  "by_action": dict(current.by_action),
                  "reasons": dict(current.reasons.most_common(ADDRESSES_SAID))}
        try:
            await self._write(Actor("unauthenticated callers", named[0][0] if len(named) == 1 else "", ""),
                              "refusals", "api and mcp", json.dumps(detail))
        except Exception as e:  # noqa: BLE001  # the trail not reachable now: the count is said in the log instead
            log.warning("refusals of unauthenticated callers not recorded (%s): %s", e, json.dumps(detail)[:500])


def _counted(counter: Counter[str], key: str, most: int) -> bool:
    """One more of `key` (bounded in length) while the counter holds fewer than `most` keys or has it already."""
    key = key[:MAX_TEXT]
    if key in counter or len(counter) < most:
        counter[key] += 1
        return True
    return False
