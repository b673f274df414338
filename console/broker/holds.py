"""Maintenance holds on the wire (console.domain.holds): a publisher follows them with `Holds`, and the
console's drain announces them around each stream's leader move. A follower also leaves a server that
says it is in lame duck mode, between its batches."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Protocol

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from console.broker.connection import identity, is_connected, on_lame_duck, reconnect_elsewhere
from console.domain.holds import HOLD_PREFIX, HeldStreams, Hold, HoldRefused, parse_hold

log = logging.getLogger(__name__)
ANSWERS_WITHIN = 0.25  # seconds the console counts the followers' answers to a hold
LEAVE_WITHIN = 10.0  # seconds a follower's batches are given to end on its server's lame duck notice; then as long
# again for the connection to be on another server


class Batch(Protocol):
    @property
    def in_flight(self) -> bool: ...


class Holds:
    """A publisher's view of the holds: `await holds.clear(subject)` before a batch's first message waits
    while a hold covers the subject (at most MAX_HOLD seconds). Each hold is answered, so the console
    counts who follows it. And its server's lame duck notice: no batch begins on the connection from then,
    and once none is in flight the connection moves to another server (a server restarted under a rolling
    upgrade closes its clients; an answer it sends during the reconnect is never heard)."""

    def __init__(self, nc: Client, name: str = ""):
        self.nc, self.name = nc, name[:100]
        self.held = HeldStreams()
        self.left: list[str] = []  # the servers left on their lame duck notice
        self._changed = asyncio.Event()
        self._subscription: Subscription | None = None
        self._begun: weakref.WeakSet[Batch] = weakref.WeakSet()
        self._leaving: asyncio.Task[None] | None = None

    @classmethod
    async def follow(cls, nc: Client, name: str = "") -> Holds:
        holds = cls(nc, name)
        holds._subscription = await nc.subscribe(f"{HOLD_PREFIX}.>", cb=holds._on_hold)
        on_lame_duck(nc, holds._on_lame_duck)
        await nc.flush()
        return holds

    @property
    def leaving(self) -> bool:
        return self._leaving is not None and not self._leaving.done()

    async def _on_lame_duck(self) -> None:
        if not self.leaving:  # nats-py's read loop calls this: the move runs beside it
            self._leaving = asyncio.get_running_loop().create_task(self._leave())

    async def _leave(self) -> None:
        server, _ = identity(self.nc)
        deadline = time.monotonic() + LEAVE_WITHIN
        try:
            while any(b.in_flight for b in list(self._begun)) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            try:
                await reconnect_elsewhere(self.nc)
            except (nats.errors.Error, OSError) as e:  # nats-py goes on reconnecting by itself
                log.info("leaving %s in lame duck mode: %s", server, e)
            deadline = time.monotonic() + LEAVE_WITHIN
            while not (is_connected(self.nc) and identity(self.nc)[0] != server) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            self.left.append(str(server))
        finally:
            self._changed.set()

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

    async def clear(self, subject: str, batch: Batch | None = None) -> float:
        """Wait while a hold covers `subject`, or the connection leaves a server in lame duck mode; the
        seconds waited. `batch`, begun then, is waited for before such a move."""
        started = time.monotonic()
        while True:
            self._changed.clear()
            end = self.held.held_until(subject, now := time.monotonic())
            if end is None and not self.leaving:
                break
            try:  # a hold's end is at most MAX_HOLD away, a move's at most twice LEAVE_WITHIN
                await asyncio.wait_for(self._changed.wait(), (end - now) if end is not None else 2 * LEAVE_WITHIN)
            except asyncio.TimeoutError:
                pass
        if batch is not None:
            self._begun.add(batch)
        return time.monotonic() - started

    async def close(self) -> None:
        if self._subscription is not None:
            sub, self._subscription = self._subscription, None
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
