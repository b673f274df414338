"""Maintenance of one node, decided before anything moves: what taking it out would do (the leaderships
it holds, the groups that would lose quorum, the batches open on the streams it leads) and a verdict.
Pure: the broker reads the cluster and taps the streams; this decides.

Batch-safe means a stream's leadership moves only between batches: the server drops every atomic
batch open on a stream whose leader changes, and ends a fail-mode fast batch with a gap. OpenBatches
follows the batches published on a stream, from the publish side (every message of an atomic batch
carries Nats-Batch-Id, its last Nats-Batch-Commit; a fast batch's reply subject says start, append and
commit), so the console can wait for a moment when none is open.

Evacuating a node (nats-server 2.15): its replicas moved to other servers, stream by stream
(`$JS.API.STREAM.PEER.EVACUATE.<stream>` with `{"peer": "<server name>"}`, verified on 2.15.1: the server
sets the stream's desired peers and moves the data). A stream every server already holds a replica of
cannot move (an R3 stream on three servers): it stays, said. An R1 stream's only replica is its leader:
moving it moves the leadership, at the moment its copy has caught up, which the console does not
choose; its publishers are held (maintenance holds) for the move."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Mapping

from console.domain.atomic_tracker import BATCH_COMMIT, BATCH_ID
from console.domain.fast_ingest import FI_SUFFIX, FastOp, FastReplySubject, InvalidReplySubject
from console.domain.server_versions import Release, release, shown
from console.domain.wire import MalformedInput

SAFE, WAIT, REFUSED = "safe", "wait", "refused"
MAX_OPEN = 10_000  # batches followed at most on one tap: a flood of batch ids forgets the oldest
# A fast batch whose commit was seen is open until the server answers the commit: the tap can hear the
# commit before the stream's leader has stored it, and a step then ends the batch with a gap.
COMMIT_ANSWER_WAIT = timedelta(seconds=1)
MAX_NODE_NAME = 128
RUN_TIMEOUT = BACK_TIMEOUT = 300.0  # seconds a restart command may take; then the node, to be back


class NotANode(MalformedInput):
    what = "server name"


def node_name(text: object) -> str:
    """A server name as an operator gives it: printable, no white space, at most MAX_NODE_NAME."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_NODE_NAME or not text.isprintable() \
            or any(c.isspace() for c in text):
        raise NotANode("not a server name: printable, no spaces, 1 to 128 characters", repr(text)[:80])
    return text


@dataclass(frozen=True)
class Group:
    """A stream, or one of its consumers: a Raft group, its leader and its peers."""

    stream: str
    consumer: str | None
    leader: str | None
    peers: tuple[tuple[str, bool, bool], ...]  # (server, current, offline) of the followers
    configured: int | None = None  # a stream's replicas as configured (None: not read); others now: a move

    @property
    def name(self) -> str:
        return self.stream if self.consumer is None else f"{self.stream} > {self.consumer}"

    @property
    def replicas(self) -> int:
        return 1 + len(self.peers)

    def members(self) -> set[str]:
        return {n for n in (self.leader, *(p[0] for p in self.peers)) if n}

    def current(self, node: str) -> bool:
        """Whether `node` leads the group, or follows it current and online."""
        return self.leader == node or any(name == node and up and not off for name, up, off in self.peers)

    def healthy_without(self, node: str) -> int:
        """The members that would still vote with `node` out: the leader and the current, online followers."""
        up = [self.leader] if self.leader and self.leader != node else []
        return len(up) + sum(1 for name, current, offline in self.peers if name != node and current and not offline)


@dataclass(frozen=True)
class OpenBatch:
    stream: str
    batch_id: str
    kind: str  # "atomic" or "fast"
    messages: int
    first: datetime
    last: datetime
    committed: datetime | None = None  # a fast batch's commit seen, its answer not yet


@dataclass
class OpenBatches:
    """The batches open on tapped streams, from their publish side. A batch is forgotten at its commit (a
    fast batch at the server's answer to its commit, heard on the reply side, or COMMIT_ANSWER_WAIT after
    the commit), or once silent past `timeout` (the server abandons it then)."""

    timeout: timedelta
    _open: dict[tuple[str, str, str], OpenBatch] = field(default_factory=dict)
    _committing: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)  # fast batch id -> its keys
    _answered_first: dict[str, bool] = field(default_factory=dict)  # fast commits answered before seen
    malformed: int = 0

    def see(self, stream: str, reply: str | None, headers: Mapping[str, str] | None, at: datetime) -> str | None:
        """Follows one message of the publish side; a fast batch's reply prefix, under which the tap hears the
        server's answers (None for anything else, and for a prefix with a wildcard token, which no
        subscription may take)."""
        batch_id = (headers or {}).get(BATCH_ID)
        if batch_id:  # any client writes it: shown escaped, as long as the server's longest
            shown = batch_id[:64] if batch_id[:64].isprintable() else repr(batch_id[:64])[1:-1][:64]
            self._seen((stream, "atomic", shown), BATCH_COMMIT in (headers or {}), at)
        elif reply and reply.endswith("." + FI_SUFFIX):
            try:
                fast = FastReplySubject.parse(reply)
            except InvalidReplySubject:
                self.malformed += 1
                return None
            if fast.op is not FastOp.PING:
                self._seen((stream, "fast", fast.batch_id), fast.op in (FastOp.COMMIT, FastOp.EOB), at,
                           answer_awaited=True)
            prefix = fast.prefix
            return None if {"*", ">"} & set(prefix.split(".")) or not prefix.isprintable() or " " in prefix else prefix
        return None

    def answered(self, reply: str) -> None:
        """A message on a fast-ingest reply subject: the server's answer to a commit ends its batch."""
        try:
            fast = FastReplySubject.parse(reply)
        except InvalidReplySubject:
            self.malformed += 1
            return
        if fast.op not in (FastOp.COMMIT, FastOp.EOB):
            return
        keys = [k for k in self._committing.pop(fast.batch_id, ()) if k in self._open]
        for key in keys:
            if self._open[key].committed is not None:
                del self._open[key]
        if not keys:  # heard before the commit itself (another server's route was quicker)
            self._answered_first[fast.batch_id] = True
            while len(self._answered_first) > MAX_OPEN:
                del self._answered_first[next(iter(self._answered_first))]

    def _seen(self, key: tuple[str, str, str], ends: bool, at: datetime, answer_awaited: bool = False) -> None:
        known = self._open.pop(key, None)
        if ends and (not answer_awaited or self._answered_first.pop(key[2], False)):
            return
        stream, kind, batch_id = key
        self._open[key] = OpenBatch(stream, batch_id, kind, (known.messages if known else 0) + 1,
                                    known.first if known else at, at, at if ends else None)
        if ends:
            keys = self._committing.setdefault(batch_id, [])
            if key not in keys:
                keys.append(key)
        while len(self._open) > MAX_OPEN:
            del self._open[next(iter(self._open))]
        while len(self._committing) > MAX_OPEN:
            del self._committing[next(iter(self._committing))]

    def on(self, stream: str, now: datetime) -> list[OpenBatch]:
        """The batches open on `stream` now (those silent past the timeout are gone: abandoned)."""
        self._forget(now)
        return [b for (s, _, _), b in self._open.items() if s == stream]

    def all(self, now: datetime) -> list[OpenBatch]:
        self._forget(now)
        return list(self._open.values())

    def _forget(self, now: datetime) -> None:
        for key, b in list(self._open.items()):
            if now - b.last > self.timeout or (b.committed is not None and now - b.committed > COMMIT_ANSWER_WAIT):
                del self._open[key]
        for batch_id in [i for i, keys in self._committing.items() if not any(k in self._open for k in keys)]:
            del self._committing[batch_id]


EVACUATE_SINCE: Release = (2, 15, 0)
MOVE_TIMEOUT = 120.0  # seconds a stream's move may take before it is cancelled as stalled


@dataclass(frozen=True)
class Evacuation:
    movable: tuple[str, ...]  # streams with a replica on the node and a server outside their group
    stuck: tuple[str, ...]  # streams every server already holds a replica of: they stay
    leader_moves: tuple[str, ...]  # of the movable, the R1 streams: their leader moves with them
    why_not: str | None = None  # the server cannot evacuate at all (its release)

    def notes(self, node: str) -> list[str]:
        if self.why_not:
            return [self.why_not]
        found = [f"evacuate: {len(self.movable)} stream(s) can move their replica off {node}"]
        if self.stuck:
            found.append(f"evacuate: {len(self.stuck)} stream(s) stay, every server holding a replica already "
                         f"(add a server or lower their replicas): {', '.join(self.stuck[:10])}")
        if self.leader_moves:
            found.append(f"evacuate: {len(self.leader_moves)} stream(s) have one replica, so their leader moves "
                         f"with them once the copy has caught up (publishers following holds wait for it): "
                         f"{', '.join(self.leader_moves[:10])}")
        return found

    def to_dict(self) -> dict[str, object]:
        return {"movable": list(self.movable), "stuck": list(self.stuck), "leader_moves": list(self.leader_moves),
                "why_not": self.why_not}


def evacuation(node: str, groups: list[Group], nodes: tuple[str, ...], version: str | None) -> Evacuation:
    """What evacuating `node` would move, on a cluster of `nodes` whose server runs `version`."""
    found = release(version)
    if found is None or found < EVACUATE_SINCE:
        return Evacuation((), (), (), f"evacuation needs nats-server {shown(EVACUATE_SINCE)} or later (this server: "
                                      f"{version or 'its release not known'}): only the leaderships move")
    streams = [g for g in groups if g.consumer is None and node in g.members()]
    movable = tuple(sorted(g.stream for g in streams if set(nodes) - g.members()))
    return Evacuation(movable, tuple(sorted(g.stream for g in streams if g.stream not in movable)),
                      tuple(sorted(g.stream for g in streams if g.stream in movable and g.replicas == 1)))


@dataclass(frozen=True)
class Plan:
    node: str
    nodes: tuple[str, ...]  # every server the cluster's groups name
    leads: tuple[Group, ...]  # the groups the node leads: streams first, then consumers
    member_of: int  # groups it holds a replica of
    meta_leader: str | None  # None: not known (no system account)
    open_batches: tuple[OpenBatch, ...]  # on the streams it leads, seen while the plan watched
    watched: float  # seconds the streams were watched for open batches
    refusals: tuple[str, ...]  # why it must not be taken out now
    waits: tuple[str, ...]  # what a drain waits for
    notes: tuple[str, ...]  # what is unavailable while it is out, and what cannot be told
    evacuate: Evacuation | None = None  # asked to move its replicas too: what would move

    @property
    def verdict(self) -> str:
        return REFUSED if self.refusals else WAIT if self.waits else SAFE

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "verdict": self.verdict, "refusals": list(self.refusals), "waits": list(self.waits),
                "notes": list(self.notes), "nodes": list(self.nodes), "meta_leader": self.meta_leader,
                "member_of": self.member_of, "watched_seconds": self.watched,
                "leads": [{"stream": g.stream, "consumer": g.consumer, "replicas": g.replicas} for g in self.leads],
                "open_batches": [{"stream": b.stream, "batch_id": b.batch_id, "kind": b.kind, "messages": b.messages,
                                  "first": b.first.isoformat(), "last": b.last.isoformat()}
                                 for b in self.open_batches],
                "evacuate": self.evacuate.to_dict() if self.evacuate else None}


def plan(node: str, groups: list[Group], meta_leader: str | None, open_batches: list[OpenBatch], watched: float,
         meta_peers: tuple[tuple[str, bool, bool], ...] = (), connected: str | None = None,
         meta_leaders: tuple[str, ...] = ()) -> Plan:
    """What taking `node` out would do. Refused: a node no group names, one already down or behind, a
    replicated group that would lose its quorum, a reconfiguration in flight on a group of the node's, two
    meta leaders. Wait: batches open on the streams it leads.
    connected: the server the console is connected to (a single server's groups name none);
    meta_leaders: every meta leader the servers named (with the system account)."""
    nodes = sorted({n for g in groups for n in g.members()} | {p[0] for p in meta_peers} |
                   ({meta_leader} if meta_leader else set()) | ({connected} if connected else set()))
    leads = sorted((g for g in groups if g.leader == node), key=lambda g: (g.consumer is not None, g.name))
    member = [g for g in groups if node in g.members()]
    refusals, waits, notes = [], [], []
    if node not in nodes:
        refusals.append(f"{node} is not a server of this cluster (its groups name {', '.join(nodes) or 'none'})")
    behind = sorted({g.name for g in member for name, current, offline in g.peers
                     if name == node and (offline or not current)})
    if behind:
        refusals.append(f"{node} is down or behind already in {len(behind)} group(s): {', '.join(behind[:5])}")
    for g in member:
        if g.replicas > 1 and g.healthy_without(node) < g.replicas // 2 + 1:
            refusals.append(f"{g.name} (R{g.replicas}) would lose its quorum: "
                            f"{g.healthy_without(node)} of {g.replicas} would be left current")
    moving = sorted(g.name for g in member if g.configured and g.replicas != g.configured)
    if moving:
        refusals.append(f"a reconfiguration is in flight on {len(moving)} group(s) of {node}'s (their peers are "
                        f"not the replicas configured: a move or a scale): {', '.join(moving[:5])}; wait for it to end")
    if len(set(meta_leaders)) > 1:
        refusals.append(f"the servers name {len(set(meta_leaders))} meta leaders ({', '.join(sorted(set(meta_leaders)))}): "
                        f"the meta group is split; heal it first")
    if meta_peers:
        healthy = (1 if meta_leader and meta_leader != node else 0) + sum(
            1 for name, current, offline in meta_peers if name != node and current and not offline)
        size = 1 + len(meta_peers)
        if healthy < size // 2 + 1:
            refusals.append(f"the meta group would lose its quorum: {healthy} of {size} left current")
    by_stream: dict[str, int] = {}
    for b in open_batches:
        by_stream[b.stream] = by_stream.get(b.stream, 0) + 1
    for stream, n in sorted(by_stream.items()):
        waits.append(f"{n} batch(es) open on {stream}: its leadership moves once they end (or the time box does)")
    for g in leads:
        if g.replicas == 1 and g.consumer is None:
            notes.append(f"{g.stream} has one replica, on {node}: it is unavailable while {node} is out")
    single = bool(groups) and not meta_peers and meta_leader is None and connected == node and \
        all(g.leader is None and not g.peers for g in groups)  # a server outside any cluster: no group anywhere
    if single:
        notes.append(f"{node} is a single server, not a cluster: no leadership can move, so a drain has nothing "
                     f"to do; taking it out stops every stream on it, and the batches open then are lost")
    elif meta_leader is None:
        notes.append("the meta leader is not known: give the system account to read it and move it last")
    elif meta_leader == node:
        notes.append(f"{node} is the meta leader: it moves last")
    return Plan(node, tuple(nodes), tuple(leads), len(member), meta_leader, tuple(open_batches), watched,
                tuple(refusals), tuple(waits), tuple(notes))


def plan_text(p: Plan) -> str:
    lines = [f"maintenance of {p.node}: {p.verdict.upper()}"]
    lines += [f"  refused: {r}" for r in p.refusals]
    lines += [f"  waits for: {w}" for w in p.waits]
    streams = [g for g in p.leads if g.consumer is None]
    consumers = [g for g in p.leads if g.consumer is not None]
    lines.append(f"  leads {len(streams)} stream(s) and {len(consumers)} consumer(s); a replica in {p.member_of} "
                 f"group(s); the cluster's servers: {', '.join(p.nodes) or 'none'}")
    lines += [f"    stream {g.stream} (R{g.replicas})" for g in streams]
    lines += [f"    consumer {g.name} (R{g.replicas})" for g in consumers]
    lines.append(f"  meta leader: {p.meta_leader or 'not known'}")
    lines.append(f"  batches open on its streams, watched {p.watched:g} s: {len(p.open_batches)}")
    lines += [f"    {b.kind} {b.batch_id} on {b.stream}: {b.messages} message(s) seen, last at "
              f"{b.last.isoformat(timespec='milliseconds')}" for b in p.open_batches]
    lines += [f"  note: {n}" for n in p.notes]
    if p.evacuate is not None and not p.evacuate.why_not:
        lines += [f"    moves its replica: {s}" for s in p.evacuate.movable]
    return "\n".join(lines)


def with_evacuation(p: Plan, evacuate: Evacuation) -> Plan:
    """The plan of a drain that also evacuates: refused where the server cannot, what moves said."""
    return replace(p, evacuate=evacuate, notes=p.notes + tuple(evacuate.notes(p.node)) if not evacuate.why_not
                   else p.notes, refusals=p.refusals + ((evacuate.why_not,) if evacuate.why_not else ()))


@dataclass(frozen=True)
class Restart:
    """What one node's restart did: its drain, the command's exit, whether the node was seen to restart
    and when it was back."""

    node: str
    moved: int
    exit_code: int | None  # None: the command did not finish within its time and was killed
    output: tuple[str, ...]
    seen_down: bool
    new_id: bool | None  # a new server id on its client port; None: its client port is not known
    back_after: float | None  # seconds from the command's start until it was current in every group
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "moved": self.moved, "exit_code": self.exit_code, "seen_down": self.seen_down,
                "new_server_id": self.new_id, "back_after_seconds": None if self.back_after is None else
                round(self.back_after, 3), "error": self.error}


def restart_line(r: Restart) -> str:
    if r.error:
        return f"{r.node}: NOT RESTARTED SAFELY: {r.error}"
    how = "a new server id" if r.new_id else "seen down" if r.seen_down else "not seen to restart"
    return f"{r.node}: restarted ({how}), current in every group after {r.back_after:.1f} s; {r.moved} leadership(s) moved first"


def rolling_order(nodes: tuple[str, ...], meta_leader: str | None) -> list[str]:
    """Followers first, the meta leader last (the meta group moves once, not once a node)."""
    return sorted(nodes, key=lambda n: (n == meta_leader, n))
