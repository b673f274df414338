"""Maintenance holds on the wire (console.domain.holds): a publisher follows them with `Holds`, and the
console's drain announces them around each stream's leader move."""

from __future__ import annotations

import asyncio
import logging
import time

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from console.domain.holds import HOLD_PREFIX, HeldStreams, Hold, HoldRefused, parse_hold

log = logging.getLogger(__name__)
ANSWERS_WITHIN = 0.25  # seconds the console counts the followers' answers to a hold


class Holds:
    """A publisher's view of the holds: `await holds.clear(subject)` before a batch's first message waits
    while a hold covers the subject (at most MAX_HOLD seconds). Each hold is answered, so the console
    counts who follows it."""

    def __init__(self, nc: Client, name: str = ""):
        self.nc, self.name = nc, name[:100]
        self.held = HeldStreams()
        self._changed = asyncio.Event()
        self._sub: Subscription | None = None

    @classmethod
    async def follow(cls, nc: Client, name: str = "") -> Holds:
        holds = cls(nc, name)
        holds._sub = await nc.subscribe(f"{HOLD_PREFIX}.>", cb=holds._on_hold)
        await nc.flush()
        return holds

    @property
    def refused(self) -> int:
        return self.held.refused

    async def _on_hold(self, msg: Msg) -> None:
        try:
            hold = parse_hold(msg.subject, msg.data)
        except HoldRefused as e:
            self.held.refused += 1
            log.debug("a maintenance hold refused: %s", e.reason)
            return
        if self.held.apply(hold, time.monotonic()):
            self._changed.set()
            if msg.reply and hold.seconds:
                try:
                    await self.nc.publish(msg.reply, Hold(hold.id, hold.stream, hold.subjects, self.name or "publisher",
                                                          hold.seconds).to_bytes())
                except nats.errors.Error:
                    pass  # the answer is a count for the console, not a condition of the hold

    async def clear(self, subject: str) -> float:
        """Wait while a hold covers `subject`; the seconds waited."""
        started = time.monotonic()
        while (end := self.held.held_until(subject, now := time.monotonic())) is not None:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), end - now)  # a hold's end is at most MAX_HOLD away
            except asyncio.TimeoutError:
                pass
        return time.monotonic() - started

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass


async def announce(nc: Client, hold: Hold, answers_within: float = ANSWERS_WITHIN) -> int:
    """Publish a hold (or its release) and count the followers that answer it within `answers_within` s."""
    if hold.seconds == 0:
        await nc.publish(hold.subject, hold.to_bytes())
        await nc.flush()
        return 0
    inbox = nc.new_inbox()
    answers = 0

    async def answered(_msg: Msg) -> None:
        nonlocal answers
        answers += 1

    sub = await nc.subscribe(inbox, cb=answered)
    try:
        await nc.publish(hold.subject, hold.to_bytes(), reply=inbox)
        await nc.flush()
        await asyncio.sleep(answers_within)
    finally:
        await sub.unsubscribe()
    return answers
