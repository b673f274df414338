"""nats-jetstream-extra (atomic and fast-ingest batches for the `nats.client` / `nats.jetstream` packages)
publishing as its own API does it, run by Python 3.13 from its own venv (tests/peers/jsextra/.venv):
a fast-ingest batch in fail mode committed with a last message, one in ok mode ended without one, and an
atomic batch. Prints one JSON line: the connection's client id and the counts the server acknowledged.

    .venv/bin/python conformant.py URL USER PASSWORD FAST_SUBJECT ATOMIC_SUBJECT"""

import asyncio
import json
import sys

import nats.jetstream_extra as jetstream_extra
from nats.client import connect
from nats.jetstream import new as jetstream


async def main(url: str, user: str, password: str, fast_subject: str, atomic_subject: str) -> None:
    nc = await connect(url, user=user, password=password)
    js = jetstream(nc)
    moment = 0.5  # a batch lasts a moment, as a real one would: the collector asks who its publisher is meanwhile

    strict = jetstream_extra.fast_publish(js, flow=10, gap_mode="fail")
    await strict.add(fast_subject, b"m1")
    await asyncio.sleep(moment)
    for i in range(2, 200):
        await strict.add(fast_subject, f"m{i}".encode())
    committed = await strict.commit(fast_subject, b"m200")

    lenient = jetstream_extra.fast_publish(js, flow=5, gap_mode="ok")
    await lenient.add(fast_subject, b"p1")
    await asyncio.sleep(moment)
    for i in range(2, 41):
        await lenient.add(fast_subject, f"p{i}".encode())
    ended = await lenient.close()

    batch = jetstream_extra.batch_publish(js)
    for i in range(1, 11):
        await batch.add(atomic_subject, f"a{i}".encode())
    atomic = await batch.commit(atomic_subject, b"a11")

    print(json.dumps({"cid": nc.server_info.client_id if nc.server_info else None,
                      "fast": getattr(committed, "batch_size", None) or getattr(committed, "sequence", None),
                      "eob": getattr(ended, "batch_size", None) or getattr(ended, "sequence", None),
                      "atomic": atomic.batch_size,
                      "batches": [strict.batch_id, lenient.batch_id, atomic.batch_id]}))
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
