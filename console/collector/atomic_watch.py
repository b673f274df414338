"""Atomic batches the server drops without an advisory: the open ones seen on the publish side, and
the stream events that drop them (a leader election, allow_atomic switched off, the stream
deleted). A named batch becomes ATOMIC_LOST; without the tap, a stream that allows atomic batches
gets one ATOMIC_OPEN_DROPPED warning per such event, since its open batches (if any) are gone unseen."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any, Mapping

from console.broker.capture import stream_atomic
from console.broker.connection import Connection, NatsError
from console.domain.atomic_tracker import (
    BATCH_COMMIT, DISABLED, LEADER_CHANGE, STREAM_DELETED, WHAT, AtomicTally, AtomicTracker, reply_prefix,
)
from console.domain.events import BatchEvent, EventKind, elected_leader
from console.domain.replies import ApiError, MalformedReply, to_reply
from console.domain.server_versions import first_message_over_the_limit
from console.domain.wire import Tally

STREAM_ACTION = "stream_action"  # a context event's detail for the stream action advisory
REMEMBERED = 10_000  # streams whose allow_atomic is known; advisories already handled
REPLY_WAIT = timedelta(seconds=2)  # a first message's reply and the message itself race to the tap
COMMIT_REPLY_KEPT = timedelta(seconds=60)  # a commit's reply subject, for a PubAck a loaded collector reads late
MAX_PREFIXES = 1000  # publisher connections whose replies are followed
NEW_STREAM = timedelta(seconds=5)  # a replicated stream's first election follows its creation: nothing was open


NO_RESPONDERS = b"\x00503"  # kept for a reply that was a no-responders status (no body says it)


def _refusal(data: bytes) -> int | None:
    """A commit's reply: None for a PubAck (or a body that is none: nothing is said of it), else the
    refusal's err_code (0: no stream answered)."""
    if data == NO_RESPONDERS:
        return 0
    try:
        reply = to_reply(data)
    except MalformedReply:
        return None
    return reply.err_code if isinstance(reply, ApiError) else None


class AtomicWatch:
    def __init__(self, nc: Connection, batch_timeout: float, max_batches: int, errors: Tally):
        self.nc = nc
        self.tracker = AtomicTracker(batch_timeout, max_batches)
        self.tally = AtomicTally()  # per publisher, for loss budgets
        self.errors = errors
        self._allows: OrderedDict[str, bool] = OrderedDict()  # stream -> allow_atomic, as last seen
        self._handled: OrderedDict[str, None] = OrderedDict()  # advisory event ids (two copies come)
        self._elected: OrderedDict[str, None] = OrderedDict()  # streams whose election was seen
        self.reply_prefixes: OrderedDict[str, None] = OrderedDict()  # followed, for 10210 on a first message
        self.replies_followed = 0  # of them, in place on the server
        self._expecting: OrderedDict[str, tuple[str, str, datetime]] = OrderedDict()  # reply -> batch, stream
        self._early: OrderedDict[str, tuple[bytes, datetime]] = OrderedDict()  # replies ahead of their message
        self._commits: OrderedDict[str, tuple[str, datetime]] = OrderedDict()  # reply -> batch, its commit seen

    def observe(self, stream: str, headers: Mapping[str, str], now: datetime, reply: str | None = None) -> list[BatchEvent]:
        """A tapped message with batch headers: what its commit's reply, come first, says. Raises
        MalformedAtomicMessage."""
        found = self.tracker.observe(stream, headers, now)
        if found is None:
            return []
        identity, seq, commits = found
        if seq == 1 and reply:
            self.tally.opened(identity, stream, reply, now)
        if not commits:
            return []
        self.tally.committed(identity, stream, seq - (headers.get(BATCH_COMMIT) == "eob"))
        if not reply or identity not in self.tracker.committing:
            return []
        if (early := self._early.pop(reply, None)) is not None:
            return self.tracker.answered(identity, _refusal(early[0]), now)
        self._commits[reply] = (identity, now)
        self._trim(self._commits, now, COMMIT_REPLY_KEPT)
        return []

    async def on_context(self, event: BatchEvent, now: datetime) -> list[BatchEvent]:
        """What a stream event means for open atomic batches: ATOMIC_LOST for each one named, else a
        warning when the stream allows atomic batches; nothing for other events."""
        if event.kind is EventKind.ATOMIC_ABANDONED and event.batch_id:
            self.tracker.abandoned(event.batch_id)
            return []
        if event.kind is not EventKind.CONTEXT or not event.stream or not self._first_time(event.event_id):
            return []
        stream, action = event.stream, event.reason if (event.detail or "").startswith(STREAM_ACTION) else None
        allowed_before = self._allows.get(stream)
        if elected_leader(event) is not None:
            first = self._remember(self._elected, stream)
            reason, allows = LEADER_CHANGE, await self._lookup(stream, new_at=event.time if first else None)
        elif action == "delete":
            reason, allows = STREAM_DELETED, allowed_before
            self._allows.pop(stream, None)
        elif action in ("create", "modify"):
            now_allows = await self._lookup(stream)
            if action == "create" or now_allows or not (allowed_before or self.tracker.open_on(stream)):
                return []
            reason, allows = DISABLED, True
        else:
            return []
        lost = self.tracker.dropped(stream, reason, now, at=event.time)
        if lost or not allows:
            return lost
        return [BatchEvent(f"{event.event_id}.atomic", EventKind.ATOMIC_OPEN_DROPPED, now, stream, reason=reason,
                           inferred=True,
                           detail=f"{WHAT[reason]}: atomic batches open on {stream}, if any, were dropped without an "
                                  "advisory; tap the publish side (--tap-publish-side) to name them")]

    def new_reply_prefix(self, reply: str) -> str | None:
        """The prefix to follow for this first message's reply, when not followed yet (bounded)."""
        prefix = reply_prefix(reply)
        if prefix is None or prefix in self.reply_prefixes or len(self.reply_prefixes) >= MAX_PREFIXES:
            return None
        self.reply_prefixes[prefix] = None
        return prefix

    def first_message(self, reply: str, batch: str, stream: str, now: datetime) -> list[BatchEvent]:
        """A batch's first message, sent as a request: its reply says whether the batch opened."""
        if (early := self._early.pop(reply, None)) is not None:
            return self._judge(batch, stream, early[0], now)
        self._expecting[reply] = (batch, stream, now)
        self._trim(self._expecting, now)
        return []

    def on_reply(self, subject: str, data: bytes, now: datetime, no_responders: bool = False) -> list[BatchEvent]:
        data = NO_RESPONDERS if no_responders else data
        if (commit := self._commits.pop(subject, None)) is not None:
            return self.tracker.answered(commit[0], _refusal(data), now)
        if (expected := self._expecting.pop(subject, None)) is not None:
            return self._judge(expected[0], expected[1], data, now)
        self._early[subject] = (bytes(data[:512]), now)
        self._trim(self._early, now)
        return []

    def _judge(self, batch: str, stream: str, data: bytes, now: datetime) -> list[BatchEvent]:
        try:
            reply = to_reply(data)
        except MalformedReply:
            return []
        if not (isinstance(reply, ApiError) and first_message_over_the_limit(reply.err_code)):
            return []
        self.tracker.abandoned(batch)  # it never opened
        return [BatchEvent(f"at.{batch}.rejected", EventKind.ATOMIC_REJECTED, now, stream, batch,
                           err_code=reply.err_code, description=reply.description)]

    @staticmethod
    def _trim(pending: OrderedDict[str, Any], now: datetime, kept: timedelta = REPLY_WAIT) -> None:
        while pending and (len(pending) > REMEMBERED or now - next(iter(pending.values()))[-1] > kept):
            pending.popitem(last=False)

    def tick(self, now: datetime) -> list[BatchEvent]:
        """The batches an election dropped whose commit never answered."""
        self._trim(self._expecting, now)
        self._trim(self._early, now)
        self._trim(self._commits, now, COMMIT_REPLY_KEPT)
        return self.tracker.tick(now)

    async def _lookup(self, stream: str, new_at: datetime | None = None) -> bool | None:
        """Whether the stream allows atomic batches (remembered); False for a stream created just
        before `new_at` (its first election), which cannot have had a batch open."""
        try:
            found = await stream_atomic(self.nc, stream)
        except (NatsError, TimeoutError) as e:
            self.errors.add(f"stream lookup: {type(e).__name__}")
            return self._allows.get(stream)
        allows, created = found if found is not None else (None, None)
        if allows is not None:
            self._allows.pop(stream, None)
            self._allows[stream] = allows
            if len(self._allows) > REMEMBERED:
                self._allows.popitem(last=False)
        if new_at is not None and created is not None and abs(new_at - created) < NEW_STREAM:
            return False
        return allows

    def _first_time(self, event_id: str) -> bool:
        return self._remember(self._handled, event_id)

    @staticmethod
    def _remember(seen: OrderedDict[str, None], key: str) -> bool:
        """Whether key is new to `seen` (bounded, oldest forgotten first); it is remembered now."""
        if key in seen:
            return False
        seen[key] = None
        if len(seen) > REMEMBERED:
            seen.popitem(last=False)
        return True
