"""A fast-ingest message ($FI reply subject) to a stream that does not allow fast batches.

    .venv/bin/python scripts/repro/fast_on_a_server_without_fast_ingest.py [VERSION]    # default 2.12.8

A release with fast ingest refuses it (10205); one without stores it as a plain message.
"""

import asyncio
import json
import sys

import nats
from nats.js.api import StreamConfig

from common import server, verdict, version


async def main(release: str) -> int:
    with server(release) as s:
        nc = await nats.connect(s.url)
        await nc.jetstream().add_stream(StreamConfig(name="R", subjects=["r.>"]))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(f"{inbox}.>")
        await nc.publish("r.x", b"x", reply=f"{inbox}.batch1.10.fail.1.0.$FI")  # first message of a fast batch
        reply = json.loads((await sub.next_msg(timeout=5)).data)
        stored = (await nc.jetstream().stream_info("R")).state.messages
        await nc.close()
    return verdict(release, "the batch is refused: 10205 (fast batch publishing not enabled on the stream)",
                   f"{json.dumps(reply)}; messages stored: {stored}", "error" not in reply)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(version(__doc__, "2.12.8"))))
