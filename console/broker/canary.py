"""The canary's streams: one per node, led by it, marked as the canary's own (the only streams it writes
to, and deletes), bounded by their limits; and one canary batch of each kind, timed."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker import names
from console.broker.atomic import AtomicBatch
from console.broker.connection import identity
from console.broker.fast import FastBatch
from console.broker.streams import StreamSpec, ensure_stream
from console.domain.canary import MARK, CanaryResult, stream_for, subject_for
from console.errors import BatchEndedError, BatchError, ConsoleError

log = logging.getLogger(__name__)
MAX_MSGS, MAX_AGE = 1_000, 3600.0  # what a canary stream holds at most: its limits, not a cleanup, keep it so
LEAD_WAIT = 10.0  # seconds a node is given to take its stream's leadership back


class CanaryRefused(ConsoleError):
    """A stream of the canary's name that the canary did not make: it is never written to."""


def _spec(node: str, domain: str | None = None) -> StreamSpec:
    return StreamSpec(stream_for(node), (f"{subject_for(node, domain)}.>",), allow_atomic=True, allow_batched=True,
                      max_msgs=MAX_MSGS, max_age=MAX_AGE, description="batch-console canary: deleted when the canary stops",
                      metadata={MARK: node})


# What the canary's batches rest on, as it made its stream: (field, the value it set; None: the server's default
# of "no limit" or "off", which the server reports as -1, 0, False or nothing).
def _made(node: str, domain: str | None = None) -> dict[str, object]:
    return {"subjects": [f"{subject_for(node, domain)}.>"], "allow_atomic": True, "allow_batched": True,
            "max_msgs": MAX_MSGS, "max_age": MAX_AGE, "sealed": None, "max_bytes": None, "max_msg_size": None,
            "max_msgs_per_subject": None, "no_ack": None, "mirror": None, "sources": None, "discard": "old",
            "deny_delete": None, "deny_purge": None}


TOO_MANY_OPEN = ("[10210]", "[10211]")  # the canary holds one batch open at a time: the others are someone else's


async def tampering(nc: Client, node: str, seen: dict[str, int], stored: int, failed: bool,
                    error: str | None = None, domain: str | None = None) -> str | None:
    """What someone other than the canary changed of the node's canary stream (its settings that a batch
    rests on, or the stream gone; and, when the batch failed, messages written to it by others since the
    canary's last look: `seen`, its stream's last sequence then, by node, kept up here), put back where the
    stream still bears the canary's mark; None when it is as the canary made it. Any client of the account may
    change it: a canary that failed through it said a healthy node was failing."""
    js, name = nc.jetstream(domain=domain), stream_for(node)
    try:
        info = await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        seen.pop(node, None)
        try:
            await _ensure(nc, node, domain)
            return f"stream {name} deleted; made again"
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError) as e:
            return f"stream {name} deleted; not made again: {str(e)[:80]}"
    config, last, before = info.config, info.state.last_seq, seen.get(node)
    seen[node] = last
    changed = []
    if failed and before is not None and last > before + stored:
        changed.append(f"{last - before - stored:,} message(s) written to it by another client")
    if failed and error and any(code in error for code in TOO_MANY_OPEN):
        changed.append("refused for batches others hold open (on its stream, or past the server's limit: "
                       "BATCH_007 and BATCH_008 tell which)")
    for key, made in _made(node, domain).items():
        value = getattr(config, key, None)
        value = getattr(value, "value", value)  # an enum as the server writes it
        if made is None:
            if value not in (None, -1, 0, False, []):
                changed.append(f"{key}={str(value)[:60]}")
        elif value != made:
            changed.append(f"{key}={str(value)[:60]}")
    if (config.metadata or {}).get(MARK) != node:
        changed.append("the canary's mark")
    if not changed:
        return None
    said = f"stream {name} changed: {', '.join(changed)}"[:280]
    if (config.metadata or {}).get(MARK) == node:
        try:
            if config.sealed:  # a sealed stream stays sealed: made again
                await js.delete_stream(name)
                await _ensure(nc, node, domain)
            else:
                await js.update_stream(_spec(node, domain).config(config.num_replicas or 1))
            said += "; put back"
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError, CanaryRefused) as e:
            said += f"; not put back: {str(e)[:80]}"
    else:  # deleted, or made again by someone else: made again where none is, never written to otherwise
        try:
            await _ensure(nc, node, domain)
            said += "; made again"
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError, CanaryRefused) as e:
            said += f"; not made again: {str(e)[:80]}"
    return said


async def _ensure(nc: Client, node: str, domain: str | None = None) -> tuple[str, bool]:
    """The node's canary stream (made if missing), and whether this call made it; CanaryRefused for a
    stream of that name without the canary's mark."""
    name = stream_for(node)
    ensured = await ensure_stream(nc.jetstream(domain=domain), _spec(node, domain))
    if (ensured.config.metadata or {}).get(MARK) != node:
        raise CanaryRefused(f"stream {name} exists and the canary did not make it: nothing is written to it")
    return name, ensured.created


async def nodes_and_streams(nc: Client, domain: str | None = None) -> tuple[list[str], list[str]]:
    """Every node of the stream group the first canary stream was placed on (the server connected to
    on a single server; in another domain, a stream named after the domain until its servers are
    known), and the canary streams this call made (the caller deletes them)."""
    here = identity(nc)[0] if domain is None else domain
    first, made = await _ensure(nc, here or "single", domain)
    info = await nc.jetstream(domain=domain).stream_info(first)
    cluster = info.cluster
    nodes = [here or "single"] if cluster is None or not cluster.leader else \
        sorted({cluster.leader, *(r.name for r in (cluster.replicas or []) if r.name)})
    created = [first] if made else []
    for node in nodes:
        name, made = await _ensure(nc, node, domain)
        if made and name not in created:
            created.append(name)
    return nodes, created


async def lead_on(nc: Client, node: str, clustered: bool, domain: str | None = None) -> bool:
    """Whether the node leads its canary stream, after asking it to take it back when another does."""
    if not clustered:
        return True
    js, name = nc.jetstream(domain=domain), stream_for(node)
    deadline = time.monotonic() + LEAD_WAIT
    asked = False
    while time.monotonic() < deadline:
        try:
            leader = ((await js.stream_info(name)).cluster or None)
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
            leader = None
        if leader is not None and leader.leader == node:
            return True
        if not asked and leader is not None and leader.leader:
            asked = True
            try:
                await nc.request(f"{names.api_prefix(domain)}.STREAM.LEADER.STEPDOWN.{name}",
                                 json.dumps({"placement": {"preferred": node}}).encode(), timeout=5)
            except (nats.errors.Error, asyncio.TimeoutError):
                pass
        await asyncio.sleep(0.2)
    return False


async def one_batch(nc: Client, system: str, node: str, kind: str, messages: int, timeout: float,
                    led_elsewhere: bool, domain: str | None = None) -> CanaryResult:
    """One canary batch of `messages` through the node's stream: milliseconds to the first ack and to the
    commit, and the messages that were not stored (all of them when it did not commit)."""
    subject, payload = f"{subject_for(node, domain)}.{kind}", b"canary"
    started = time.perf_counter()
    first_ack = commit = None
    stored, error = 0, None
    batch = AtomicBatch(nc, timeout=timeout) if kind == "atomic" else \
        FastBatch(nc, flow=max(1, messages // 2), ack_timeout=timeout)
    try:
        await batch.add(subject, payload)  # the first message waits for its ack: staged, or the first flow ack
        first_ack = time.perf_counter()
        for _ in range(messages - 2):
            await batch.add(subject, payload)
        ack = await batch.commit(subject, payload)
        commit, stored = time.perf_counter(), ack.count or 0
    except BatchEndedError as e:
        error, stored = str(e)[:300], (e.puback.count or 0) if e.puback is not None else 0
    except (BatchError, nats.errors.Error, asyncio.TimeoutError) as e:
        error = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        if isinstance(batch, FastBatch):
            await batch.close()

    def ms(at: float | None) -> float | None:
        return None if at is None else round((at - started) * 1000, 3)

    return CanaryResult(system, node, kind, ms(first_ack), ms(commit), max(0, messages - stored), messages, error,
                        led_elsewhere, domain=domain)


async def delete_streams(nc: Client, names: list[str], domain: str | None = None) -> None:
    """Deletes these canary streams, each only when it still bears the canary's mark."""
    js = nc.jetstream(domain=domain)
    for name in names:
        try:
            if MARK in ((await js.stream_info(name)).config.metadata or {}):
                await js.delete_stream(name)
        except nats.js.errors.NotFoundError:
            pass
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError) as e:  # the others still go
            log.warning("canary stream %s not deleted: %s", name, e)
