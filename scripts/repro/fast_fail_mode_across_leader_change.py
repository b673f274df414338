"""A fail-mode fast batch on a replicated stream whose leader changes while messages are in flight.

    .venv/bin/python scripts/repro/fast_fail_mode_across_leader_change.py [VERSION]    # default 2.15.1

The claim checked: the publisher gets 10208 for every later message, where ADR-50 says a gap notice
and (fail mode) a final PubAck. Three nodes on loopback; each try: an R3 stream allowing fast
batches, 30 messages with flow 10 (the ack for 10 awaited, 11..30 in flight), the stream's leader
stepped down at once, then 10 more messages and the commit. A try where the new leader had every
message commits all 41 and tells nothing; the tries go on until one loses messages in flight.
"""

import asyncio
import json
import sys

import nats
import nats.errors
import nats.js.errors
from nats.js.api import StreamConfig

from common import cluster, not_applicable, verdict, version

FLOW, TRIES = 10, 10


async def leader(js, stream: str) -> str | None:
    try:
        return (await js.stream_info(stream)).cluster.leader
    except Exception:  # no leader yet: asked again
        return None


async def until(condition, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise SystemExit("the cluster did not answer in time")
        await asyncio.sleep(0.05)


async def create(js, stream: str) -> str | None:
    """None once the stream exists; the server's refusal when it has no such flag."""
    async def made() -> bool:  # a new cluster places R3 streams once every node has joined
        try:
            await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=3,
                                             allow_batched=True))
            return True
        except nats.js.errors.BadRequestError as e:
            if "allow_batched" in (e.description or ""):
                raise SystemExit(e.description) from None
            return False
        except (nats.js.errors.APIError, nats.errors.TimeoutError):
            return False

    try:
        await until(made)
    except SystemExit as refused:
        return str(refused)
    return None


async def one_try(nc, stream: str) -> tuple[int, list[dict]]:
    """(the highest sequence flow-acked before the leader changed, the replies after it)."""
    js, subject, replies = nc.jetstream(), f"{stream.lower()}.x", []

    async def on_reply(msg):
        replies.append(json.loads(msg.data))

    inbox = nc.new_inbox()
    await nc.subscribe(f"{inbox}.>", cb=on_reply)
    for seq in range(1, 31):
        await nc.publish(subject, b"x", reply=f"{inbox}.b.{FLOW}.fail.{seq}.{0 if seq == 1 else 1}.$FI")
        if seq == 10:  # the ack that lets the next window go; 11..30 go out without waiting
            await until(lambda: _true(any(r.get("type") == "ack" and r["seq"] >= seq for r in replies)))
    acked = max(r["seq"] for r in replies if r.get("type") == "ack")
    before = await leader(js, stream)
    await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
    await until(lambda: _changed(js, stream, before))
    after = len(replies)
    for seq in range(31, 41):
        await nc.publish(subject, b"x", reply=f"{inbox}.b.{FLOW}.fail.{seq}.1.$FI")
    await nc.publish(subject, b"x", reply=f"{inbox}.b.{FLOW}.fail.41.2.$FI")
    await until(lambda: _true(any("count" in r or "error" in r for r in replies[after:])))  # an end
    await asyncio.sleep(0.3)  # what else the server sends
    return acked, replies[after:]


async def main(release: str) -> int:
    with cluster(release) as c:
        nc = await nats.connect(c.urls)
        try:
            for n in range(1, TRIES + 1):
                if (refused := await create(nc.jetstream(), f"R{n}")) is not None:
                    return not_applicable(release, refused)
                acked, later = await one_try(nc, f"R{n}")
                if not any(r.get("count") == 41 for r in later):  # messages were lost: what was the publisher told?
                    break
        finally:
            await nc.close()
    lost = not any(r.get("count") == 41 for r in later)
    told_of_loss = any(r.get("type") == "gap" for r in later) and any("count" in r for r in later)
    return verdict(release, "a gap notice for the messages lost, then (fail mode) a final PubAck of what was stored",
                   f"try {n} of {TRIES}: flow-acked up to {acked} before the leader changed, then "
                   f"{json.dumps(later)[:400]}", lost and not told_of_loss)


async def _true(value: bool) -> bool:
    return value


async def _changed(js, stream: str, before: str | None) -> bool:
    return (await leader(js, stream)) not in (None, before)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(version(__doc__, "2.15.1"))))
