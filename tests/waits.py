"""Waiting on conditions (never on time alone), shared by the test folders."""

from __future__ import annotations

import asyncio
import subprocess
import time

import nats.errors
import nats.js.errors

from console.broker.eventlog import EventLog


async def collector_ready(js, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    """A collector is ready once its durable advisory consumer exists; fails early if its process died. An
    answer that does not come in time (a cluster busy electing the stream's leader) counts as not yet."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await js.consumer_info("BATCH_CONSOLE_ADVISORIES", "batch-console-collector")
            return
        except (nats.js.errors.NotFoundError, nats.errors.TimeoutError):
            assert proc is None or proc.poll() is None, "the collector process exited"
            assert asyncio.get_running_loop().time() < deadline, "the collector did not become ready"
            await asyncio.sleep(0.05)


async def wait_until(condition, timeout: float = 10.0, what="condition") -> None:
    """Poll a cheap, in-process condition until it holds. Time the test process itself was not run (a
    0.01 s sleep that took seconds, on a host with every core busy) is not counted against the condition:
    the bytes it waits for are then still unread in the socket, not late. `what` may be a callable, to say
    how things stand at the end (as poll_until's)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"{what() if callable(what) else what} not met in time"
        before = loop.time()
        await asyncio.sleep(0.01)
        if (stalled := loop.time() - before - 0.01) > 0.5:
            deadline += stalled


async def eventually(probe, until=bool, timeout: float = 15.0, what: str = "condition", every: float = 0.1):
    """Await probe() until until(its result) holds, and return that result. A probe that fails with a
    NATS error (a server coming back, say) counts as not yet."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            value = await probe()
            if until(value):
                return value
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError) as e:
            value = e
        assert asyncio.get_running_loop().time() < deadline, f"{what} not met in time; last: {value!r} {value}"[:3000]
        await asyncio.sleep(every)


def poll_until(condition, timeout: float, what, every: float = 0.2):
    """The synchronous twin, for tests that drive processes and a browser rather than an event loop;
    returns what the condition returned. `what` may be a callable, to say how things stand at the end."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(every)
    return value


class Events(list):
    """Events that a failure lists in a line each way: kind and batch, every one of them."""

    def __repr__(self) -> str:
        return "[" + ", ".join(f"{e.kind.value} {e.batch_id}" for e in self) + "]"

    __str__ = __repr__


async def events_for(client, batch_ids, until, timeout=15.0):
    """Read the event log until `until(events)` holds for the events of these batches."""
    log = EventLog(client.jetstream())

    async def events():
        return Events(e for _, e in await log.read(1, idle_timeout=0.2) if e.batch_id in batch_ids)

    return await eventually(events, until, timeout, f"events of {sorted(batch_ids)[:5]}")
