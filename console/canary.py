"""`batch-console canary`: an atomic and a fast-ingest batch through every node, on a schedule, timed to
the first ack and to the commit, their losses counted; each result an event in the event log (the
Canary page, /metrics, the checks and alert rules read it). `--once` measures one round and prints it
(`--format json`: one object per node and kind). The canary writes only to streams it made (marked),
bounded by their limits, and deletes those it made when it stops."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable

from console.broker.canary import delete_streams, lead_on, nodes_and_streams, one_batch, tampering
from console.broker.connection import Connection, NatsError
from console.broker.eventlog import EventLog
from console.domain.canary import KINDS, CanaryResult, ms_text, stream_for


@dataclass(frozen=True)
class CanaryOptions:
    system: str = "default"
    messages: int = 10  # of each canary batch
    timeout: float = 5.0  # seconds a canary batch waits for each reply
    every: float = 60.0  # seconds between rounds
    once: bool = False
    domains: tuple[str, ...] = ()  # JetStream domains (leaf nodes') measured too, each through its own API


REDISCOVER = 10  # rounds between two looks for the nodes (and streams made again)


@dataclass
class CanaryRun:
    rounds: int = 0
    results: list[CanaryResult] = field(default_factory=list)  # the last round's
    made: dict[str | None, list[str]] = field(default_factory=dict)  # by domain, the canary streams this run made
    nodes: dict[str | None, list[str]] = field(default_factory=dict)  # by domain (None: the system's own), as last found
    last_seq: dict[str, int] = field(default_factory=dict)  # each node's canary stream's last sequence, as last seen


async def one_round(nc: Connection, options: CanaryOptions, run: CanaryRun) -> list[CanaryResult]:
    """A batch of each kind through each node, of the system's own domain then of each domain named. A node
    that does not answer is its batches' failure, never the round's: the nodes found before are measured
    while a look for them fails; a domain not reached is said as its one failed result."""
    results: list[CanaryResult] = []
    for domain in (None, *options.domains):
        try:
            results += await _domain_round(nc, options, run, domain)
        except (NatsError, asyncio.TimeoutError) as e:
            if domain is None:
                raise
            results.append(CanaryResult(options.system, f"(domain {domain})", KINDS[0], None, None, options.messages,
                                        options.messages, f"domain {domain} not reached: {str(e)[:200]}",
                                        domain=domain))
    run.rounds += 1
    run.results = results
    return results


async def _domain_round(nc: Connection, options: CanaryOptions, run: CanaryRun,
                        domain: str | None) -> list[CanaryResult]:
    if not run.nodes.get(domain) or run.rounds % REDISCOVER == 0:
        try:
            run.nodes[domain], made = await nodes_and_streams(nc, domain)
            kept = run.made.setdefault(domain, [])
            kept += [name for name in made if name not in kept]
        except (NatsError, asyncio.TimeoutError):
            if not run.nodes.get(domain):
                raise
    nodes, results = run.nodes[domain], []
    for node in nodes:
        try:
            led = await lead_on(nc, node, len(nodes) > 1, domain)
        except (NatsError, asyncio.TimeoutError):
            led = False
        for kind in KINDS:
            result = await one_batch(nc, options.system, node, kind, options.messages, options.timeout, not led, domain)
            try:  # judged on its own stream first: a failure through a stream someone else changed is not the node's
                changed = await tampering(nc, node, run.last_seq, result.sent - result.lost, result.failed,
                                          result.error, domain)
            except (NatsError, asyncio.TimeoutError):
                changed = None
            results.append(replace(result, tampered=changed) if changed else result)
    return results


async def run_canary(nc: Connection, options: CanaryOptions, log: EventLog | None = None,
                     stopping: Callable[[], bool] = lambda: False) -> CanaryRun:
    """Rounds until `stopping()` (one with `once`), each result written to `log` when given; the canary
    streams this run made are deleted at the end, whatever ended it."""
    run, instance = CanaryRun(), uuid.uuid4().hex[:8]
    try:
        while True:
            results = await one_round(nc, options, run)
            if log is not None:
                now = datetime.now(timezone.utc)
                await log.append([r.event(instance, now, stream_for(r.node)) for r in results])
            if options.once or stopping():
                return run
            for _ in range(int(options.every * 10)):
                if stopping():
                    return run
                await asyncio.sleep(0.1)
    finally:
        for domain, made in run.made.items():
            await delete_streams(nc, made, domain)


def as_text(results: list[CanaryResult]) -> str:
    def ms(value: float | None) -> str:
        return ms_text(value, "-")

    def where(r: CanaryResult) -> str:
        return r.node if r.domain is None else f"{r.node} ({r.domain})"

    lines = [f"{'system':<12}{'node (domain)':<28}{'kind':<8}{'first ack ms':>14}{'commit ms':>12}{'lost':>7}  error"]
    lines += [f"{r.system[:11]:<12}{where(r)[:27]:<28}{r.kind:<8}{ms(r.first_ack_ms):>14}{ms(r.commit_ms):>12}"
              f"{r.lost:>7}  {r.error or ''}" + ("  (led elsewhere)" if r.led_elsewhere else "") for r in results]
    return "\n".join(lines)


def as_json_lines(results: list[CanaryResult]) -> str:
    return "\n".join(json.dumps(r.to_json()) for r in results)
