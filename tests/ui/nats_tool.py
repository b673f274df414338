"""Sets up and inspects server state for the browser tests, in a process of its own (the browser
tests are synchronous): `python -m tests.ui.nats_tool seed-replay URL STREAM` or `ack-pending URL STREAM`."""

import asyncio
import sys

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from console.broker.atomic import AtomicBatch

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


async def main(command: str, url: str, stream: str) -> None:
    nc = await nats.connect(url)
    try:
        if command == "seed-replay":
            await seed_replay(nc, stream)
        else:
            print((await nc.jetstream().consumer_info(stream, "ops")).num_ack_pending)
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
