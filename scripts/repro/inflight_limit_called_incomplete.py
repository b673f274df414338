"""The first message of an atomic batch over the stream's in-flight limit is called 'incomplete'.

    .venv/bin/python scripts/repro/inflight_limit_called_incomplete.py [VERSION]    # default 2.12.8

The server's default limit is 50 open atomic batches a stream; the 51st first message is the case.
"""

import asyncio
import json
import sys

import nats
from nats.js.api import StreamConfig

from common import server, verdict, version

LIMIT = 50


async def main(release: str) -> int:
    with server(release) as s:
        nc = await nats.connect(s.url)
        await nc.jetstream().add_stream(StreamConfig(name="R", subjects=["r.>"], allow_atomic=True))
        for n in range(1, LIMIT + 1):  # opened and left open; a staged message gets an empty reply
            await nc.request("r.x", b"x", timeout=5, headers={"Nats-Batch-Id": f"b{n}", "Nats-Batch-Sequence": "1"})
        reply = await nc.request("r.x", b"x", timeout=5, headers={"Nats-Batch-Id": "one-too-many",
                                                                 "Nats-Batch-Sequence": "1"})
        await nc.close()
    error = json.loads(reply.data)["error"]
    return verdict(release, "10210 (atomic publish too many inflight), code 429: back off and retry",
                   f"{error['err_code']} ({error['description']}), code {error['code']}", error["err_code"] != 10210)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(version(__doc__, "2.12.8"))))
