"""A node's replicas moved off it (nats-server 2.15), after its leaderships (console.broker.maintenance.drain):
each stream asked to evacuate the node (`$JS.API.STREAM.PEER.EVACUATE.<stream>`), then read until the node
is no longer among its replicas; a move that has not ended within its time is cancelled
(`$JS.API.STREAM.CANCEL_MOVE.<stream>`), said. An R1 stream's leader moves with its only replica: it is
asked only at a moment no batch is open on it, under a maintenance hold until the move has ended."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker import names
from console.broker.admin import js_api
from console.broker.holds import announce
from console.broker.maintenance import MOVES_AT_ONCE, Tap, quiet_moment, read_group
from console.domain.holds import MAX_HOLD, Hold
from console.domain.maintenance import Evacuation, Group, OpenBatch
from console.errors import Refusal

MOVE_POLL = 0.5  # seconds between reads of a moving stream's replicas


@dataclass(frozen=True)
class Evacuated:
    stream: str
    seconds: float  # from the request to the node's leaving the group (or to the cancel)
    replicas: tuple[str, ...]  # the stream's servers afterwards
    error: str | None = None
    cancelled: bool = False  # stalled past its time: the move was cancelled
    at_risk: tuple[OpenBatch, ...] = ()  # an R1 stream's batches open when it was asked to move
    followers: int = 0  # publishers that answered its hold

    def to_dict(self) -> dict[str, object]:
        return {"stream": self.stream, "seconds": round(self.seconds, 3), "replicas": list(self.replicas),
                "error": self.error, "cancelled": self.cancelled, "publishers_held": self.followers,
                "at_risk": [{"stream": b.stream, "batch_id": b.batch_id, "kind": b.kind} for b in self.at_risk]}

    def line(self) -> str:
        if self.error is None:
            return f"{self.stream}: its replica moved off in {self.seconds:.1f} s, now on {', '.join(self.replicas)}"
        return f"{self.stream}: NOT MOVED: {self.error}"


async def evacuate(nc: Client, node: str, evacuation: Evacuation, time_box: float, batch_timeout: float,
                   move_timeout: float, said: Callable[[str], None] = lambda _: None) -> list[Evacuated]:
    """Every movable stream's replica off `node`, R1 streams between batches; each said as it ends."""
    held = list(evacuation.leader_moves)
    tap = await Tap.on(nc, held, timedelta(seconds=batch_timeout)) if held else None
    done: list[Evacuated] = []
    at_once = asyncio.Semaphore(MOVES_AT_ONCE)
    try:
        if tap is not None:
            said(f"watching {len(held)} single-replica stream(s) for open batches for {batch_timeout:g} s "
                 f"before their move")
            await asyncio.sleep(batch_timeout)

        async def one(stream: str) -> None:
            async with at_once:
                done.append(await _evacuate(nc, node, stream, tap if stream in held else None, time_box,
                                            move_timeout))
                said(done[-1].line())

        await asyncio.gather(*(one(s) for s in evacuation.movable))
    finally:
        if tap is not None:
            await tap.close()
    return done


async def _evacuate(nc: Client, node: str, stream: str, tap: Tap | None, time_box: float,
                    move_timeout: float) -> Evacuated:
    at_risk: list[OpenBatch] = []
    hold, followers = None, 0
    if tap is not None and (subjects := tap.subjects.get(stream, ())):
        _, at_risk = await quiet_moment(tap, stream, time_box)
        hold = Hold(uuid.uuid4().hex, stream, subjects, node, min(MAX_HOLD, move_timeout))
        followers = await announce(nc, hold)
    started = time.monotonic()
    try:
        try:
            await js_api(nc, f"$JS.API.STREAM.PEER.EVACUATE.{names.stream(stream)}", {"peer": node})
        except (Refusal, nats.errors.Error, asyncio.TimeoutError, ValueError) as e:
            return Evacuated(stream, time.monotonic() - started, (), str(e)[:300] or type(e).__name__,
                             at_risk=tuple(at_risk), followers=followers)
        group = None
        while time.monotonic() - started < move_timeout:
            await asyncio.sleep(MOVE_POLL)
            try:
                group = await read_group(nc, Group(stream, None, None, ()))
            except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
                continue
            if node not in group.members() and group.leader:
                return Evacuated(stream, time.monotonic() - started, tuple(sorted(group.members())),
                                 at_risk=tuple(at_risk), followers=followers)
        why = f"still on {node} after {move_timeout:g} s: the move was cancelled"
        try:
            await js_api(nc, f"$JS.API.STREAM.CANCEL_MOVE.{names.stream(stream)}", None)
        except (Refusal, nats.errors.Error, asyncio.TimeoutError) as e:
            why = f"still on {node} after {move_timeout:g} s, and its cancel was refused: {str(e)[:200]}"
        return Evacuated(stream, time.monotonic() - started, tuple(sorted(group.members())) if group else (), why,
                         cancelled=True, at_risk=tuple(at_risk), followers=followers)
    finally:
        if hold is not None:
            try:
                await announce(nc, hold.released())
            except (nats.errors.Error, asyncio.TimeoutError):
                pass  # the hold ends by itself within MAX_HOLD
