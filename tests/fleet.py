"""What the tests of several NATS systems share: a systems file naming servers, and a loss on one."""

from __future__ import annotations

import asyncio
import concurrent.futures

from console.broker.atomic import AtomicBatch


def systems_text(**urls: str) -> str:
    """A systems file naming each system with its one server."""
    return "".join(f'[[system]]\nname = "{name}"\nservers = ["{url}"]\n\n' for name, url in urls.items())


async def abandon(nc, stream: str, batch_id: str) -> None:
    """An atomic batch started and never committed: the server abandons it after its 1 s timeout."""
    await nc.jetstream().add_stream(name=stream, subjects=[stream.lower()], allow_atomic=True)
    batch = AtomicBatch(nc, batch_id=batch_id)
    await batch.add(stream.lower(), b"x")
    batch.discard()


def run_apart(coroutine):
    """A coroutine run to its end on a loop of its own thread (a browser test's thread has Playwright's)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
