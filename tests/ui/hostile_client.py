"""An ordinary client of the console's account, run as a process by the hostile-input tests.

    python hostile_client.py URL inputs            every malformed input of issue 13, then prints counts
    python hostile_client.py URL flood-advisories  600 well-formed forged abandonments of stream FLOOD
    python hostile_client.py URL flood-acks N      N forged flow acks of batches that never were
    python hostile_client.py URL forged-status     collector_status events no collector wrote
    python hostile_client.py URL poison            one deeply nested advisory
    python hostile_client.py URL real              a real abandonment and a real gapped fast batch (JSON ids)
    python hostile_client.py URL events KEYFILE ID the kinds of the signed events of batch ID
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timezone

import nats
from nats.js.api import StreamConfig

ABANDONED = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED"
ADVISORY = {"type": "io.nats.jetstream.advisory.v1.stream_batch_abandoned", "id": "forged", "stream": "X",
            "batch": "forged", "reason": "timeout", "timestamp": "2026-11-21T02:47:57Z"}


def advisory(**fields) -> bytes:
    return json.dumps({**ADVISORY, **fields}).encode()


MALFORMED = [  # (subject, body): each must be rejected by the collector
    (f"{ABANDONED}.X", b"[" * 50000),
    (f"{ABANDONED}.X", advisory(id="bad-stream", stream="a b")),
    (f"{ABANDONED}.X", advisory(id="bad-time", timestamp="0001-01-01T00:00:00+01:00")),
    ("_INBOX.hostile.h1.10.ok.5.1.$FI", b'{"type":"gap","last_seq":4,"seq":99999999999999999999999}'),
    ("_INBOX.hostile.h2.10.ok.5.2.$FI", b'{"stream":"a b","seq":5}'),
    ("_INBOX.hostile.h3.10.ok.5.1.$FI", b'{"type":"gap","last_seq":12,"seq":4}'),
    ("_INBOX.hostile.h4.10.ok.5.1.$FI", b"[" * 50000),
]
IN_THE_LOG = [  # straight into the event log: readers must drop them
    b"[" * 50000,
    b'{"event_id":"g1","kind":"fast_progress","time":"2026-11-21T03:00:00Z","flow":"abc"}',
    b'{"event_id":"g2","kind":"fast_gap","time":"2026-11-21T03:00:00Z","seq":"abc"}',
]


async def inputs(nc) -> None:
    for subject, body in MALFORMED:
        await nc.publish(subject, body)
    for body in IN_THE_LOG:
        await nc.publish("batch_console.events.fast_gap.S", body)
    print(json.dumps({"malformed": len(MALFORMED), "in_the_log": len(IN_THE_LOG)}))


async def flood_advisories(nc) -> None:
    for i in range(600):
        await nc.publish(f"{ABANDONED}.FLOOD", advisory(id=f"flood{i}", stream="FLOOD", batch=f"flood{i}",
                                                        timestamp=datetime.now(timezone.utc).isoformat()))


async def flood_acks(nc, count: int) -> None:
    for i in range(count):
        await nc.publish(f"_INBOX.forger.forged{i}.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":10}')
        if i % 1000 == 0:
            await nc.flush()


async def forged_status(nc) -> None:
    for i in range(20):
        body = json.dumps({"event_id": f"status.forged.{i}", "kind": "collector_status",
                           "time": datetime.now(timezone.utc).isoformat(), "detail": '{"healthy": true}', "v": 1})
        await nc.publish("batch_console.events.collector_status._unknown", body.encode())
        await asyncio.sleep(1)


async def real(nc) -> None:
    from console.broker.atomic import AtomicBatch
    from console.broker.fast import BatchEndedError, FastBatch

    js = nc.jetstream()
    for name, flags in (("REAL_A", {"allow_atomic": True}), ("REAL_F", {"allow_batched": True})):
        try:
            await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], **flags))
        except nats.js.errors.BadRequestError:
            pass  # made by an earlier call
    atomic = AtomicBatch(nc)
    await atomic.add("real_a.x", b"1")
    atomic.discard()  # the server abandons it after its batch timeout
    fast = FastBatch(nc, flow=5, gap_mode="fail")
    try:
        for seq in range(1, 30):
            if seq == 12:
                fast.skip_seq()
            await fast.add("real_f.x", b"x")
        await fast.commit_eob()
    except BatchEndedError:
        pass
    print(json.dumps({"atomic": atomic.batch_id, "fast": fast.batch_id}))


async def events(nc, key_file: str, batch_id: str) -> None:
    from console.broker.eventlog import EventLog
    from console.config import EventLogSettings, event_key

    log = EventLog(nc.jetstream(), EventLogSettings(key=event_key(key_file)))
    found = [e.kind.value for _, e in await log.read(1, idle_timeout=1.0) if e.batch_id == batch_id]
    print(json.dumps(found))


async def main(url: str, action: str, *rest: str) -> None:
    nc = await nats.connect(url)
    try:
        if action == "inputs":
            await inputs(nc)
        elif action == "flood-advisories":
            await flood_advisories(nc)
        elif action == "flood-acks":
            await flood_acks(nc, int(rest[0]))
        elif action == "forged-status":
            await forged_status(nc)
        elif action == "poison":
            await nc.publish(f"{ABANDONED}.X", b"[" * 50000)
        elif action == "real":
            await real(nc)
        elif action == "events":
            await events(nc, *rest)
        await nc.flush()
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
