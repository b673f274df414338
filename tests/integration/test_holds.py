"""Maintenance holds on a real server: a fast batch of a publisher that follows holds does not begin on
a held subject until the release (its first message reaches the stream only then), a batch on another
subject goes on, the hold is answered once per follower, and hostile holds published beside it are
counted and hold nothing."""

from __future__ import annotations

import asyncio
import uuid

from nats.js.api import StreamConfig

from console.broker.fast import FastBatch
from console.broker.holds import Holds, announce
from console.domain.holds import Hold


async def test_a_followers_batch_begins_only_after_the_release_and_forged_holds_hold_nothing(nc):
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="HOLD_F", subjects=["hold_f.>"], allow_batched=True))
    await js.add_stream(StreamConfig(name="HOLD_G", subjects=["hold_g.>"], allow_batched=True))
    holds = await Holds.follow(nc, "test publisher")
    try:
        for forged in (b"{", b"[" * 50_000, b'{"v": 1}', b"x" * 10_000,
                       b'{"v": 1, "id": "%s", "stream": "HOLD_G", "subjects": ["hold_f.>"], "node": "n1", '
                       b'"seconds": 30}' % uuid.uuid4().hex.encode()):  # its subject names another stream
            await nc.publish("batch_console.hold.HOLD_F", forged)
        hold = Hold(uuid.uuid4().hex, "HOLD_F", ("hold_f.>",), "n1", 30.0)
        assert await announce(nc, hold) == 1  # one follower answered
        assert holds.refused == 5

        other = FastBatch(nc, flow=10, holds=holds)
        await other.add("hold_g.x", b"not held")  # another stream's subject: begins at once
        held = FastBatch(nc, flow=10, holds=holds)
        beginning = asyncio.ensure_future(held.add("hold_f.x", b"first"))
        for _ in range(20):  # the batch's task runs to where it waits (a server round trip below, too)
            await asyncio.sleep(0)
        assert (await js.stream_info("HOLD_F")).state.messages == 0 and not beginning.done()
        await announce(nc, hold.released())
        await asyncio.wait_for(beginning, 10)
        assert held.held > 0
        await held.commit("hold_f.x", b"last")
        await other.commit("hold_g.x", b"last")
        assert (await js.stream_info("HOLD_F")).state.messages == 2
        await announce(nc, hold)  # the same hold published again: holds no one
        again = FastBatch(nc, flow=10, holds=holds)
        await asyncio.wait_for(again.add("hold_f.x", b"not held again"), 5)
        await again.commit("hold_f.x", b"last")
        assert holds.refused == 6
    finally:
        await holds.close()
