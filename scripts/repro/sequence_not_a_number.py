"""An atomic batch message whose Nats-Batch-Sequence is not a number is refused as 'too large'.

    .venv/bin/python scripts/repro/sequence_not_a_number.py [VERSION]    # default 2.12.8
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
        await nc.jetstream().add_stream(StreamConfig(name="R", subjects=["r.>"], allow_atomic=True))
        reply = await nc.request("r.x", b"x", timeout=5, headers={"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "abc"})
        await nc.close()
    error = json.loads(reply.data)["error"]
    return verdict(release, "10175 (atomic publish sequence is missing)", f"{error['err_code']} ({error['description']})",
                   error["err_code"] != 10175)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(version(__doc__, "2.12.8"))))
