"""Sets up and inspects server state for the browser tests, in a process of its own (the browser
tests are synchronous): `python -m tests.ui.nats_tool seed-replay URL STREAM`, `seed-large URL STREAM`,
`ack-pending URL STREAM`, `consumers URL STREAM`, `delete-stream URL STREAM`, `abandonments URL`,
`seed-consumers URL STREAM`, `consumer URL STREAM NAME` (its info as JSON) or `delete-consumer URL STREAM NAME`."""

import asyncio
import json
import sys

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.eventlog import EventLog

HOSTILE_PAYLOAD = b"<img src=x onerror=alert(1)>"


async def seed_replay(nc, stream: str) -> None:
    """A plain message with markup for a payload, then batch replay-b1 of 3 JSON messages; a durable `ops`."""
    js = nc.jetstream()
    subject = stream.lower()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{subject}.>"], allow_atomic=True))
    await js.publish(f"{subject}.plain", HOSTILE_PAYLOAD)
    batch = AtomicBatch(nc, batch_id="replay-b1")
    for part in (1, 2):
        await batch.add(f"{subject}.orders", f'{{"part": {part}}}'.encode())
    await batch.commit(f"{subject}.orders", b'{"part": 3}')
    await js.add_consumer(stream, ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT, ack_wait=60))


async def seed_large(nc, stream: str, count: int = 60, size: int = 100 * 1024) -> None:
    """`count` messages of `size` bytes of word characters (what the costliest predicates chew on)."""
    await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"]))
    for _ in range(count):
        await nc.jetstream().publish(f"{stream.lower()}.x", b"ab" * (size // 2))


async def abandonments(nc) -> str:
    """`advisories events distinct`: batch_abandoned advisories captured, and the event log's copies."""
    js = nc.jetstream()
    advisories = 0
    sub = await js.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", ordered_consumer=True,
                             stream="BATCH_CONSOLE_ADVISORIES")
    try:
        while (msg := await sub.next_msg(timeout=2)) is not None:
            advisories += 1
            if msg.metadata.num_pending == 0:
                break
    except nats.errors.TimeoutError:
        pass
    await sub.unsubscribe()
    events = [e for _, e in await EventLog(js).read(1, kind_filter="atomic_abandoned.>", idle_timeout=0.5)]
    return f"{advisories} {len(events)} {len({e.event_id for e in events})}"


async def seed_consumers(nc, stream: str) -> None:
    """Ten messages and two durable pull consumers that have read none: `billing` and `doomed`."""
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"]))
    for i in range(10):
        await js.publish(f"{stream.lower()}.{i}", b"m")
    for name in ("billing", "doomed"):
        await js.add_consumer(stream, ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT))


async def main(command: str, url: str, stream: str = "", name: str = "") -> None:
    nc = await nats.connect(url)
    try:
        if command == "seed-consumers":
            await seed_consumers(nc, stream)
        elif command == "consumer":
            info = await nc.jetstream().consumer_info(stream, name)
            print(json.dumps({"paused": bool(getattr(info, "paused", False)), "pending": info.num_pending,
                              "ack_pending": info.num_ack_pending, "delivered": info.delivered.stream_seq}))
        elif command == "delete-consumer":
            await nc.jetstream().delete_consumer(stream, name)
        elif command == "seed-replay":
            await seed_replay(nc, stream)
        elif command == "seed-large":
            await seed_large(nc, stream)
        elif command == "abandonments":
            print(await abandonments(nc))
        elif command == "delete-stream":  # a test's own stream gone: the shared console's pages stay short
            await nc.jetstream().delete_stream(stream)
        elif command == "consumers":
            print((await nc.jetstream().stream_info(stream)).state.consumer_count)
        else:
            print((await nc.jetstream().consumer_info(stream, "ops")).num_ack_pending)
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
