"""Maintenance on the wire: the cluster's groups as the server reports them, a tap on the publish side of
the streams a node leads (their open batches), batch-safe leader step-downs, and the lease that keeps
two maintenances from overlapping (a key in the console's own KV bucket; see the README's "Maintenance
protocol")."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ClusterInfo, KeyValueConfig
from nats.js.kv import KeyValue

from console.broker import names
from console.broker.admin import leader_step_down
from console.broker.holds import announce
from console.broker.nats_internals import server_info
from console.domain.holds import MAX_HOLD, Hold
from console.domain.fast_ingest import FI_SUFFIX
from console.domain.maintenance import Group, OpenBatch, OpenBatches, Plan, evacuation, plan, with_evacuation
from console.errors import ConsoleError, Refusal

log = logging.getLogger(__name__)
LEASE_BUCKET, LEASE_KEY = "BATCH_CONSOLE_MAINTENANCE", "lease"
LEASE_TTL = 30.0  # seconds a lease outlives the console that holds it (renewed every LEASE_TTL / 3)
MOVED_WITHIN = 15.0  # seconds a new leader is waited for after a step-down
QUIET_POLL = 0.02  # seconds between looks for a quiet moment on a stream
MOVES_AT_ONCE = 8  # streams waited for and stepped down at the same time
MAX_REPLY_PREFIXES = 64  # fast publishers' reply prefixes a tap subscribes to (a flood of them adds none)


class MaintenanceRefused(ConsoleError):
    """A maintenance that must not start (or go on): why, in the operator's words."""


async def read_groups(nc: Client, consumers: bool = True) -> list[Group]:
    """Every stream's Raft group (and its consumers') as the server reports them."""
    js = nc.jetstream()
    found = []
    for info in await js.streams_info():
        name = info.config.name or ""
        found.append(_group(name, None, info.cluster, info.config.num_replicas))
        if consumers and info.cluster is not None and info.state.consumer_count:
            for c in await js.consumers_info(name):
                found.append(_group(name, c.name, c.cluster))
    return found


def _group(stream: str, consumer: str | None, cluster: ClusterInfo | None, configured: int | None = None) -> Group:
    if cluster is None:  # a single server: no groups, nothing moves
        return Group(stream, consumer, None, ())
    peers = tuple((r.name or "?", bool(r.current), bool(r.offline)) for r in (cluster.replicas or []))
    return Group(stream, consumer, cluster.leader, peers, configured)


async def read_meta(system_nc: Client | None) -> tuple[str | None, tuple[tuple[str, bool, bool], ...]]:
    """The meta leader and its followers, from the system account (None without one)."""
    leader, peers, _ = await read_meta_all(system_nc)
    return leader, peers


async def read_meta_all(system_nc: Client | None) -> tuple[str | None, tuple[tuple[str, bool, bool], ...],
                                                            tuple[str, ...]]:
    """read_meta's, and every meta leader the servers name (two: a split the cluster must heal first)."""
    return _meta_of(await _jsz_answers(system_nc)) if system_nc is not None else (None, (), ())


async def _jsz_answers(system_nc: Client) -> list[Any]:
    """Every server's JSZ answer within 2 s (at most 64)."""
    inbox = system_nc.new_inbox()
    answers: list[Any] = []
    sub = await system_nc.subscribe(inbox, cb=None)
    try:
        await system_nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and len(answers) < 64:
            try:
                msg = await sub.next_msg(timeout=max(0.05, deadline - time.monotonic()))
            except nats.errors.TimeoutError:
                break
            try:
                answers.append(json.loads(msg.data))
            except ValueError:
                continue
    finally:
        await sub.unsubscribe()
    return answers


def _meta_of(answers: list[Any]) -> tuple[str | None, tuple[tuple[str, bool, bool], ...], tuple[str, ...]]:
    """(the first meta leader named, its followers, every leader named) from the servers' JSZ answers."""
    found: tuple[str | None, tuple[tuple[str, bool, bool], ...]] = (None, ())
    leaders: list[str] = []
    for answer in answers:
        meta = ((answer.get("data") or {}) if isinstance(answer, dict) else {}).get("meta_cluster") or {}
        if isinstance(meta, dict) and isinstance(meta.get("leader"), str) and meta["leader"]:
            if found[0] is None:
                found = meta["leader"], tuple((str(r.get("name", "?")), bool(r.get("current")), bool(r.get("offline")))
                                              for r in meta.get("replicas") or [] if isinstance(r, dict))
            leaders.append(meta["leader"][:128])
    return found[0], found[1], tuple(sorted(set(leaders)))


@dataclass
class Tap:
    """The publish side of some streams: every message published on their subjects, fed to OpenBatches,
    and the server's answers to fast batches' commits under the publishers' reply prefixes (up to
    MAX_REPLY_PREFIXES of them; nats-py has one per connection, nats.js one per batch)."""

    nc: Client
    batches: OpenBatches
    started: float = field(default_factory=time.monotonic)
    subjects: dict[str, tuple[str, ...]] = field(default_factory=dict)  # stream -> its subjects
    reply_prefixes: set[str] = field(default_factory=set)  # fast publishers' inboxes whose answers are heard
    _subscribed: list[Subscription] = field(default_factory=list)

    @classmethod
    async def on(cls, nc: Client, streams: list[str], timeout: timedelta) -> Tap:
        tap = cls(nc, OpenBatches(timeout))
        js = nc.jetstream()
        for stream in streams:
            subjects = (await js.stream_info(names.stream(stream))).config.subjects or []
            tap.subjects[stream] = tuple(subjects)
            for subject in subjects:
                tap._subscribed.append(await nc.subscribe(subject, cb=tap._for(stream)))
        await nc.flush()
        return tap

    def _for(self, stream: str) -> Callable[[Msg], Awaitable[None]]:
        async def seen(msg: Msg) -> None:
            prefix = self.batches.see(stream, msg.reply, msg.headers, datetime.now(timezone.utc))
            if prefix is not None and prefix not in self.reply_prefixes and len(self.reply_prefixes) < MAX_REPLY_PREFIXES:
                self.reply_prefixes.add(prefix)  # heard from the batch's first message on: before its commit
                try:
                    self._subscribed.append(await self.nc.subscribe(f"{prefix}.*.*.*.*.*.{FI_SUFFIX}", cb=self._answer))
                except nats.errors.Error as e:  # not allowed to: its commits wait COMMIT_ANSWER_WAIT instead
                    log.info("the answers under %r are not heard: %s", prefix[:80], e)
        return seen

    async def _answer(self, msg: Msg) -> None:
        self.batches.answered(msg.subject)

    @property
    def watched(self) -> float:
        return time.monotonic() - self.started

    async def close(self) -> None:
        for sub in self._subscribed:
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass


BEHIND_READS, BEHIND_EVERY = 5, 0.5  # a follower not current on every read, 2 s apart at most, is behind


async def make_plan(nc: Client, node: str, system_nc: Client | None, batch_timeout: float,
                    watch: float = 2.0, evacuate: bool = False) -> Plan:
    """What taking `node` out would do, changing nothing: its groups read from the server, the batches open
    on the streams it leads watched for `watch` seconds; `evacuate`: its replicas to move too (2.15)."""
    groups = await read_groups(nc)
    for _ in range(BEHIND_READS - 1):  # a busy group's follower is a few entries behind for a moment, so
        if all(up or off for g in groups for _, up, off in g.peers):  # a node behind, a quorum at risk
            break  # are what stays so: read again a few times
        await asyncio.sleep(BEHIND_EVERY)
        groups = await read_groups(nc)
    meta_leader, meta_peers, named = await read_meta_all(system_nc)
    for _ in range(BEHIND_READS - 1):  # servers disagree for a moment during an election: two leaders stay two
        if len(named) <= 1:
            break
        await asyncio.sleep(BEHIND_EVERY)
        meta_leader, meta_peers, named = await read_meta_all(system_nc)
    led = sorted({g.stream for g in groups if g.leader == node and g.consumer is None})
    open_now: list[OpenBatch] = []
    if watch > 0 and led:
        tap = await Tap.on(nc, led, timedelta(seconds=batch_timeout))
        try:
            await asyncio.sleep(watch)  # a batch open now shows on its next message, within the batch timeout
            open_now = tap.batches.all(datetime.now(timezone.utc))
        finally:
            await tap.close()
    made = plan(node, groups, meta_leader, open_now, watch if led else 0, meta_peers, connected_to(nc), named)
    if not evacuate:
        return made
    version = server_info(nc).get("version")
    return with_evacuation(made, evacuation(node, groups, made.nodes, version if isinstance(version, str) else None))


def connected_to(nc: Client) -> str | None:
    """The name of the server this connection is on (its INFO's server_name)."""
    name = server_info(nc).get("server_name")
    return name if isinstance(name, str) and name else None


async def server_names(nc: Client, system_nc: Client | None) -> list[str]:
    """The servers of this system by name: those its streams' groups name, the meta group's, this one."""
    groups = await read_groups(nc, consumers=False)
    leader, peers = await read_meta(system_nc)
    found = {n for g in groups for n in g.members()} | {p[0] for p in peers} | ({leader} if leader else set())
    here = connected_to(nc)
    return sorted(found | ({here} if here else set()))


@dataclass(frozen=True)
class Move:
    """One leadership moved off the node: what waited, for how long, and what was open at the step."""

    group: str
    waited: float  # seconds waited for a quiet moment
    at_risk: tuple[OpenBatch, ...]  # batches still open when the time box ended: named before the step
    new_leader: str | None
    error: str | None = None
    followers: int = 0  # publishers that answered the stream's maintenance hold (console.domain.holds)

    def to_dict(self) -> dict[str, object]:
        return {"group": self.group, "waited_seconds": round(self.waited, 3), "new_leader": self.new_leader,
                "error": self.error, "publishers_held": self.followers,
                "at_risk": [{"stream": b.stream, "batch_id": b.batch_id, "kind": b.kind} for b in self.at_risk]}


class Lease:
    """One maintenance at a time per account: a key in the console's KV bucket, created (never overwritten)
    by the console that starts one, renewed while it runs, deleted at its end; a console killed midway
    leaves it to expire after LEASE_TTL seconds."""

    def __init__(self, kv: KeyValue, revision: int, holder: str):
        self._kv, self._revision, self.holder = kv, revision, holder
        self._renewing: asyncio.Task[None] | None = None

    @classmethod
    async def take(cls, nc: Client, holder: str, node: str, replicas: int = 1) -> Lease:
        """replicas: 3 on a cluster of three or more, so the lease outlives the node under maintenance."""
        js = nc.jetstream()
        try:
            kv = await js.key_value(LEASE_BUCKET)
        except nats.js.errors.BucketNotFoundError:
            kv = await js.create_key_value(KeyValueConfig(bucket=LEASE_BUCKET, history=1, ttl=LEASE_TTL, replicas=replicas,
                                                          description="batch-console: the maintenance lease"))
        body = json.dumps({"holder": holder[:200], "node": node,
                           "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode()
        try:
            revision = await kv.create(LEASE_KEY, body)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise MaintenanceRefused("another maintenance is under way: " + await _holder(kv)) from None
        lease = cls(kv, revision, holder)
        lease._renewing = asyncio.ensure_future(lease._renew(body))
        return lease

    async def _renew(self, body: bytes) -> None:
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            try:
                self._revision = await self._kv.update(LEASE_KEY, body, last=self._revision)
            except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError) as e:
                log.warning("the maintenance lease was not renewed: %r", e)

    async def release(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
        try:
            await self._kv.delete(LEASE_KEY, last=self._revision)
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError) as e:
            log.warning("the maintenance lease was not released (it expires in %g s): %r", LEASE_TTL, e)


async def _holder(kv: KeyValue) -> str:
    try:
        entry = await kv.get(LEASE_KEY)
        said = json.loads(entry.value or b"{}")
        return f"{str(said.get('holder'))[:200]} on {str(said.get('node'))[:128]} since {str(said.get('since'))[:40]}"
    except (nats.js.errors.Error, ValueError, AttributeError):
        return "its holder could not be read"


async def step_down(nc: Client, group: Group, preferred: str | None) -> None:
    """The group's leader steps down, to `preferred` where the server takes a placement (2.11 and later)."""
    await leader_step_down(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{names.stream(group.stream)}" if group.consumer is None
                           else f"$JS.API.CONSUMER.LEADER.STEPDOWN.{names.stream(group.stream)}.{group.consumer}",
                           preferred)


async def read_group(nc: Client, group: Group) -> Group:
    """The group as its leader reports it now."""
    js = nc.jetstream()
    info = await (js.stream_info(group.stream) if group.consumer is None else js.consumer_info(group.stream, group.consumer))
    return _group(group.stream, group.consumer, info.cluster)


async def leader_of(nc: Client, group: Group) -> str | None:
    return (await read_group(nc, group)).leader


async def drain(nc: Client, node: str, plan_: Plan, time_box: float, batch_timeout: float,
                said: Callable[[str], None] = lambda _: None) -> list[Move]:
    """Every leadership off `node`, batch-safely: each stream's at a moment when no batch is open on it
    (waited for up to `time_box` seconds; a batch open then is named before the step), then its consumers'.
    The node keeps serving as a follower.

    The tap sees a batch begun before it on the batch's next message; one that sends none within the
    batch timeout is abandoned by the server. So the streams are watched for one batch timeout before the
    first step: from then on every open batch is known."""
    streams = [g for g in plan_.leads if g.consumer is None and g.replicas > 1]
    tap = await Tap.on(nc, [g.stream for g in streams], timedelta(seconds=batch_timeout))
    moves: list[Move] = []
    try:
        if streams:
            said(f"watching {len(streams)} stream(s) for open batches for {batch_timeout:g} s (the batch timeout)")
            await asyncio.sleep(batch_timeout)
        at_once = asyncio.Semaphore(MOVES_AT_ONCE)

        async def move(group: Group) -> None:
            async with at_once:
                moves.append(await move_when_quiet(nc, node, group, tap, time_box))
                said(move_line(moves[-1]))

        # each stream as soon as it is quiet: one busy stream holds no other back
        await asyncio.gather(*(move(g) for g in streams))
        for group in [g for g in plan_.leads if g.consumer is not None and g.replicas > 1]:
            await move(group)
    finally:
        await tap.close()
    return moves


async def move_when_quiet(nc: Client, node: str, group: Group, tap: Tap, time_box: float) -> Move:
    """One leadership off `node`: a stream's at a moment no batch is open on it (up to `time_box` s), under a
    maintenance hold (publishers that follow it begin no batch on the stream until the new leader is read
    back), at once for a consumer's; the new leader read back."""
    subjects = tap.subjects.get(group.stream, ()) if group.consumer is None else ()
    if not subjects:
        return await _move(nc, node, group, tap, time_box)
    hold = Hold(uuid.uuid4().hex, group.stream, subjects, node, min(MAX_HOLD, time_box + MOVED_WITHIN))
    followers = await announce(nc, hold)
    try:
        return replace(await _move(nc, node, group, tap, time_box), followers=followers)
    finally:
        try:
            await announce(nc, hold.released())
        except (nats.errors.Error, asyncio.TimeoutError) as e:  # the hold ends by itself within MAX_HOLD
            log.warning("the release of %s's maintenance hold was not sent: %s", group.stream, e)


async def quiet_moment(tap: Tap, stream: str, time_box: float) -> tuple[float, list[OpenBatch]]:
    """Waits up to `time_box` s for no batch open on the stream: (seconds waited, the batches open still)."""
    started = time.monotonic()
    while (open_now := tap.batches.on(stream, datetime.now(timezone.utc))) and time.monotonic() - started < time_box:
        await asyncio.sleep(QUIET_POLL)
    return time.monotonic() - started, open_now


async def _move(nc: Client, node: str, group: Group, tap: Tap, time_box: float) -> Move:
    waited, at_risk = await quiet_moment(tap, group.stream, time_box) if group.consumer is None else (0.0, [])
    preferred = next((name for name, current, offline in group.peers if name != node and current and not offline), None)
    try:
        await step_down(nc, group, preferred)
    except (Refusal, nats.errors.Error, asyncio.TimeoutError, ValueError) as e:
        return Move(group.name, waited, tuple(at_risk), None, str(e)[:300] or type(e).__name__)
    deadline = time.monotonic() + MOVED_WITHIN
    leader = None
    while time.monotonic() < deadline:
        try:
            leader = await leader_of(nc, group)
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
            leader = None
        if leader and leader != node:
            return Move(group.name, waited, tuple(at_risk), leader)
        await asyncio.sleep(0.1)
    return Move(group.name, waited, tuple(at_risk), leader, f"still led by {leader or 'no one'} after {MOVED_WITHIN:g} s")


def move_line(m: Move) -> str:
    where = f"to {m.new_leader}" if m.error is None else f"NOT MOVED: {m.error}"
    risk = f"; {len(m.at_risk)} batch(es) still open at the step: " + ", ".join(
        f"{b.kind} {b.batch_id}" for b in m.at_risk[:10]) if m.at_risk else ""
    held = f"; {m.followers} publisher(s) held their new batches" if m.followers else ""
    return f"{m.group}: moved {where} after {m.waited:.2f} s waiting for a quiet moment{held}{risk}"


def moves_text(moves: list[Move]) -> str:
    return "\n".join(move_line(m) for m in moves)


def moves_summary(moves: list[Move], most: int = 1000) -> str:
    """The moves in a line an audit record holds (at most `most` characters)."""
    moved = sum(1 for m in moves if m.error is None)
    risk = [f"{b.kind} {b.batch_id} on {b.stream}" for m in moves for b in m.at_risk]
    failed = [f"{m.group}: {m.error}" for m in moves if m.error is not None]
    held = sum(m.followers for m in moves)
    text = f"moved {moved} of {len(moves)} leadership(s); {len(risk)} batch(es) open at a step" + \
        (f" ({', '.join(risk)})" if risk else "") + (f"; {held} hold answer(s) from publishers" if held else "") + \
        (f"; not moved: {'; '.join(failed)}" if failed else "")
    return text if len(text) <= most else text[:most - 1] + "…"
