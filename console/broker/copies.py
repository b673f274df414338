"""The copies of leaf domains' atomic streams at this system, and their messages' headers read from now on
(console.collector.copy_watch follows batches through them)."""

from __future__ import annotations

import asyncio
from typing import Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import DeliverPolicy

from console.broker import names
from console.domain.copies import Copy

Seen = Callable[[int, "dict[str, str] | None"], None]  # (stream sequence, headers) of each message


async def copies_of(nc: Client, domains: tuple[str, ...]) -> list[Copy]:
    """This system's streams that copy (source or mirror) an atomic stream of one of the domains."""
    apis = {names.api_prefix(d): d for d in domains}
    found: list[Copy] = []
    for info in await nc.jetstream().streams_info():
        config = info.config
        for source in [*(config.sources or []), *([config.mirror] if config.mirror else [])]:
            api = source.external.api if source.external is not None else None
            if api not in apis or not source.name:
                continue
            try:
                origin = await nc.jetstream(domain=apis[api]).stream_info(source.name)
            except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
                continue  # the leaf cut off: looked for again
            if origin.config.allow_atomic and config.name:
                found.append(Copy(config.name, source.name, apis[api]))
    return found


async def read_headers(nc: Client, stream: str, domain: str | None, seen: Seen) -> Subscription:
    """Every message stored in the stream from now on, headers only (an ordered consumer, which the server
    deletes once its reader is gone); a message without metadata is skipped."""
    js = nc.jetstream(domain=domain)

    async def each(msg: Msg) -> None:
        try:
            seq = msg.metadata.sequence.stream
        except (ValueError, AttributeError, TypeError, IndexError):
            return
        seen(seq, msg.headers)

    return await js.subscribe("", stream=stream, cb=each, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW,
                              headers_only=True)


async def stop_reading(sub: Subscription) -> None:
    try:
        await sub.unsubscribe()
    except nats.errors.Error:
        pass
