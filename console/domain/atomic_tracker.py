"""Atomic batches seen on the publish side (the opt-in tap): which are open, so that a stream event
that drops open batches without any advisory names each of them lost (ATOMIC_LOST). The server
drops an open atomic batch silently when the stream elects a new leader (its commit then gets
10176), when an update switches allow_atomic off, and when the stream is deleted.

An election is judged by each batch's commit, when its reply is followed: the tap's order of a batch's
first message and the election's advisory is not the server's (a batch the tap saw open at the
advisory may have begun on the new leader and commit; one it saw begin after may have begun on the
old one and be refused). So at an election the open batches are only suspects: a PubAck clears one,
a refusal names it lost, and one whose commit never answers (the publisher gave up, or its replies
are not followed) is named lost, inferred, a batch timeout after it was last seen. A commit refused
with 10176 soon after an election is that election's loss, whatever the tap's order.

Pure and bounded: a batch is forgotten once its commit is answered (or not, ANSWER_WAIT), when an
advisory names it, or once silent past the batch timeout (the server abandons it then, with an advisory).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Mapping, TypeVar

from console.domain.events import BatchEvent, EventKind
from console.domain.server_versions import INCOMPLETE
from console.domain.wire import INT64_MAX, MalformedInput, Tally, batch_id

BATCH_ID, BATCH_SEQUENCE, BATCH_COMMIT = "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"
BATCH_HEADERS = (BATCH_ID, BATCH_SEQUENCE, BATCH_COMMIT)
REQUIRED_API_LEVEL = "Nats-Required-Api-Level"
KEPT_HEADERS = (*BATCH_HEADERS, REQUIRED_API_LEVEL)  # what the publish-side tap keeps of a batch message
# Why open atomic batches were dropped, as ATOMIC_LOST's reason.
LEADER_CHANGE, DISABLED, STREAM_DELETED = "leader_change", "disabled", "stream_deleted"
MAX_COUNTED_STREAMS = 10_000  # streams whose atomic batches are counted
KEPT_PAST_TIMEOUT = 30.0  # seconds a quiet batch is kept past the batch timeout, for a late stream event
ANSWER_WAIT = 2.0  # seconds a commit's reply is waited for once the tap saw the commit (they race to it)
ELECTION_SLACK = 2.0  # a batch the tap saw begin this long after an election's advisory may have met it
WHAT = {LEADER_CHANGE: "the stream elected a new leader", DISABLED: "an update switched allow_atomic off",
        STREAM_DELETED: "the stream was deleted"}


class MalformedAtomicMessage(MalformedInput):
    what = "atomic batch message"


def reply_prefix(reply: str) -> str | None:
    """The subscription that sees a publisher connection's replies (`_INBOX.<nuid>.*` for nats-py's
    request inbox); None for a reply subject that is not a plain one."""
    tokens = reply.split(".")
    if len(tokens) < 3 or len(reply) > 256 or any(not t or t in ("*", ">") or not t.isprintable() or " " in t
                                                  for t in tokens):
        return None
    return ".".join(tokens[:-1]) + ".*"


@dataclass
class OpenAtomic:
    batch_id: str
    stream: str
    first_seen: datetime
    last_seen: datetime
    last_seq: int
    dropped_at: datetime | None = None  # an election's time, if one may have dropped it (a suspect)
    committed_at: datetime | None = None  # when the tap saw its commit, whose reply is then waited for
    size: int | None = None  # its messages, the commit's included, once the tap saw the commit (an eob not counted)


def batch_message(headers: Mapping[str, str]) -> tuple[str, int, bool] | None:
    """(batch id, sequence, commits) of a message with batch headers; None for any other message.
    Raises MalformedAtomicMessage for headers the server would refuse."""
    if BATCH_ID not in headers:
        return None
    identity = batch_id(headers[BATCH_ID], BATCH_ID, MalformedAtomicMessage)
    text = headers.get(BATCH_SEQUENCE, "")
    if not (text.isascii() and text.isdigit() and len(text) <= 19) or not 1 <= int(text) <= INT64_MAX:
        raise MalformedAtomicMessage(f"{BATCH_SEQUENCE} {text[:30]!r} is not a sequence from 1")
    return identity, int(text), BATCH_COMMIT in headers


V = TypeVar("V")


def _put(kept: dict[str, V], key: str, value: V, most: int) -> None:
    """key -> value as the newest of `kept`, whose oldest go past `most` (insertion order)."""
    kept.pop(key, None)
    kept[key] = value
    while len(kept) > most:
        del kept[next(iter(kept))]


class AtomicTracker:
    def __init__(self, batch_timeout: float = 10.0, max_batches: int = 10_000):
        self.batch_timeout = batch_timeout
        self.max_batches = max_batches
        self.batches: dict[str, OpenAtomic] = {}
        self.untracked = Tally()  # stream -> batches not tracked (the tracker was full)
        self.messages = 0  # batch messages seen
        self.started: dict[str, int] = {}  # stream -> atomic batches seen open since the start (loss budgets)
        self.committing: dict[str, OpenAtomic] = {}  # committed on the publish side, the reply not yet seen
        self.refused: dict[str, tuple[OpenAtomic, int, datetime]] = {}  # commits refused, no cause known yet
        # Said lost because their commit's reply was not seen in ANSWER_WAIT (a loaded collector reads it
        # late): a PubAck that comes after all retracts the loss
        self.unheard: OrderedDict[str, str] = OrderedDict()  # batch -> stream
        self.elections: OrderedDict[str, datetime] = OrderedDict()  # stream -> its last election's time

    def observe(self, stream: str, headers: Mapping[str, str], now: datetime) -> tuple[str, int, bool] | None:
        """One tapped message on a stream's subject: its (batch id, sequence, commits), None for a message
        of no batch. Raises MalformedAtomicMessage."""
        seen = batch_message(headers)
        if seen is None:
            return None
        identity, seq, commits = seen
        self.messages += 1
        if commits:
            if (batch := self.batches.pop(identity, None)) is not None:  # its reply says; else an advisory
                batch.committed_at = now  # last_seq stays: what was open when dropped
                batch.size = seq - 1 if headers.get(BATCH_COMMIT) == "eob" else seq
                _put(self.committing, identity, batch, self.max_batches)
            return seen
        batch = self.batches.get(identity)
        if batch is None and seq == 1 and (stream in self.started or len(self.started) < MAX_COUNTED_STREAMS):
            self.started[stream] = self.started.get(stream, 0) + 1
        if batch is None:
            if len(self.batches) >= self.max_batches:
                self.untracked.add(stream)
                return seen
            batch = self.batches[identity] = OpenAtomic(identity, stream, now, now, seq)
        batch.last_seen, batch.last_seq = now, max(batch.last_seq, seq)
        return seen

    def open_on(self, stream: str) -> int:
        return sum(1 for b in self.batches.values() if b.stream == stream)

    def dropped(self, stream: str, reason: str, now: datetime, at: datetime | None = None) -> list[BatchEvent]:
        """Every batch open on the stream when the event happened (`at`, the server's time; else now) is
        lost, for this reason (one of WHAT); one quiet for the batch timeout by then had been abandoned,
        with its advisory, and is forgotten. An election's are suspects, judged by their commits."""
        at = at or now
        on_stream = [b for b in self.batches.values() if b.stream == stream]
        lost = [b for b in on_stream if (at - b.last_seen).total_seconds() <= self.batch_timeout]
        if reason == LEADER_CHANGE:
            _put(self.elections, stream, at, MAX_COUNTED_STREAMS)
            open_then = {b.batch_id for b in lost}
            for batch in on_stream:
                if batch.batch_id in open_then:
                    batch.dropped_at = batch.dropped_at or at
                else:
                    del self.batches[batch.batch_id]
            for batch in self.committing.values():
                if batch.stream == stream and batch.first_seen <= at + timedelta(seconds=ELECTION_SLACK):
                    batch.dropped_at = batch.dropped_at or at  # committed as the stream elected: its reply says
            explained = [b for b, refused, when in self.refused.values()
                         if b.stream == stream and self._met(b, at) and at <= when + timedelta(seconds=ELECTION_SLACK)]
            return [self._lost(b, LEADER_CHANGE, now, inferred=False, refused=self.refused.pop(b.batch_id)[1])
                    for b in explained]
        for batch in on_stream:
            del self.batches[batch.batch_id]
        return [self._lost(b, reason, now, inferred=True) for b in lost]

    def answered(self, identity: str, refused: int | None, now: datetime) -> list[BatchEvent]:
        """A batch's commit was answered: a PubAck (refused None) or a refusal's err_code (0: no stream
        answered). A refusal is lost: to the election that met the batch, at once when one is known (its
        advisory can come after the reply); else held for the advisory that names it (then it is the
        advisory's), or an election's, and named lost unexplained a batch timeout and ANSWER_WAIT later."""
        batch = self.committing.pop(identity, None)
        if batch is None and (stream := self.unheard.pop(identity, None)) is not None and refused is None:
            return [BatchEvent(f"at.{identity}.retracted", EventKind.LOSS_RETRACTED, now, stream, identity,
                               reason=LEADER_CHANGE, detail="its commit's PubAck came after the batch was said "
                                                           "lost: it was not lost")]
        if batch is None or refused is None:
            return []
        elected = self.elections.get(batch.stream)
        if batch.dropped_at is not None or (elected is not None and self._met(batch, elected)):
            return [self._lost(batch, LEADER_CHANGE, now, inferred=False, refused=refused)]
        _put(self.refused, identity, (batch, refused, now), self.max_batches)
        return []

    @staticmethod
    def _met(batch: OpenAtomic, elected: datetime) -> bool:
        """Whether an election at that time can have dropped the batch (the tap's clock is not the server's)."""
        return elected >= batch.first_seen - timedelta(seconds=ELECTION_SLACK)

    def _lost(self, b: OpenAtomic, reason: str, now: datetime, inferred: bool, refused: int | None = None) -> BatchEvent:
        if refused is None:
            said = "the server dropped it without an advisory (its commit gets 10176)" + (
                "; its commit's reply was not seen" if b.committed_at is not None else "")
        else:
            said = f"its commit was refused ({refused})" if refused else "no stream answered its commit"
        when = f"open with {b.last_seq} message(s) sent when {WHAT[reason]}" if reason in WHAT else \
            f"{b.last_seq} message(s) sent, then the commit; neither an advisory nor an election said why"
        return BatchEvent(f"at.{b.batch_id}.lost", EventKind.ATOMIC_LOST, now, b.stream, b.batch_id, reason=reason,
                          seq=b.last_seq, count=b.size, inferred=inferred, detail=f"{when}; {said}")

    def abandoned(self, identity: str) -> None:
        """An advisory named the batch: nothing more to say of it here."""
        self.batches.pop(identity, None)
        self.committing.pop(identity, None)
        self.refused.pop(identity, None)

    def tick(self, now: datetime) -> list[BatchEvent]:
        """The suspects whose commit never answered, lost (inferred). Forget the batches the server has
        abandoned (and said so), once the event that would have dropped them while open can no longer
        be on its way: an election's advisory comes late on a busy system."""
        lost = []
        for identity, batch in list(self.committing.items()):
            assert batch.committed_at is not None
            if (now - batch.committed_at).total_seconds() > ANSWER_WAIT:
                del self.committing[identity]
                if batch.dropped_at is not None:
                    lost.append(self._lost(batch, LEADER_CHANGE, now, inferred=True))
                    _put(self.unheard, identity, batch.stream, self.max_batches)
        for identity, (batch, refused, when) in list(self.refused.items()):
            if (now - when).total_seconds() > self.batch_timeout + ANSWER_WAIT:
                del self.refused[identity]  # refused, and neither an advisory nor an election said why
                reason = {INCOMPLETE: "incomplete", 0: "no_responders"}.get(refused, "error")
                lost.append(self._lost(batch, reason, now, inferred=False, refused=refused))
        for identity, batch in list(self.batches.items()):
            quiet = (now - max(batch.last_seen, batch.dropped_at or batch.last_seen)).total_seconds()
            if batch.dropped_at is not None and quiet > self.batch_timeout + ANSWER_WAIT:
                del self.batches[identity]  # never committed: the publisher gave up, or its commit was not seen
                lost.append(self._lost(batch, LEADER_CHANGE, now, inferred=True))
            elif quiet > self.batch_timeout + KEPT_PAST_TIMEOUT:
                del self.batches[identity]
        return lost



MAX_WAITING = 10_000  # atomic batches waiting to be put to their publisher, or for their commit
MAX_TALLIED = 10_000  # (stream, publisher) pairs counted
MAX_STREAM_PUBLISHERS, MAX_PUBLISHER = 100, 256  # publishers of a stream, a name's length: past them no one's
# (bounded so that one stream's counts fit in one stream_totals event)
PUBLISHER_WAIT = 120.0  # seconds a batch waits for the answer of who sent it, then counted as no one's


class AtomicTally:
    """The atomic batches the publish side saw open and the messages their commits stored, per stream and
    publisher (cumulative: what loss budgets count a publisher's atomic batches by). A batch is put to
    its publisher once the question of who sent it is answered, or to "" (no one known) when it is not
    asked or has waited PUBLISHER_WAIT; its commit's messages go where the batch went. Bounded: past
    the bounds a batch is no one's."""

    def __init__(self) -> None:
        self.waiting: dict[str, tuple[str, str, datetime, int]] = {}  # batch -> stream, reply, seen, messages
        self.placed: OrderedDict[str, tuple[str, str]] = OrderedDict()  # batch -> stream, publisher: its commit's
        self.counts: dict[str, dict[str, list[int]]] = {}  # stream -> publisher -> [batches, messages]

    def opened(self, batch: str, stream: str, reply: str, now: datetime) -> None:
        if batch in self.waiting or batch in self.placed:
            return
        if len(self.waiting) >= MAX_WAITING:
            self._count(stream, "", 1, 0)
            return
        self.waiting[batch] = (stream, reply, now, 0)

    def committed(self, batch: str, stream: str, messages: int) -> None:
        if (waiting := self.waiting.get(batch)) is not None:
            self.waiting[batch] = (*waiting[:3], messages)  # counted with the batch, once placed
        elif (placed := self.placed.pop(batch, None)) is not None:
            self._count(*placed, 0, messages)
        else:  # its first message was not seen (or past the bounds): no one's
            self._count(stream, "", 0, messages)

    def settle(self, publisher_of: Callable[[str, str], str | None], now: datetime) -> None:
        """Put each waiting batch whose publisher is known to it: `publisher_of(batch, reply)` is its
        publisher ("" when none can be known), or None while it is still asked."""
        for batch, (stream, reply, seen, messages) in list(self.waiting.items()):
            publisher = publisher_of(batch, reply)
            if publisher is None and (now - seen).total_seconds() < PUBLISHER_WAIT:
                continue
            del self.waiting[batch]
            self._count(stream, publisher or "", 1, messages)
            if not messages:  # its commit is still to come
                self.placed[batch] = (stream, publisher or "")
                while len(self.placed) > MAX_WAITING:
                    self.placed.popitem(last=False)

    def _count(self, stream: str, publisher: str, batches: int, messages: int) -> None:
        by = self.counts.get(stream)
        if len(publisher) > MAX_PUBLISHER or (by is not None and publisher not in by and len(by) >= MAX_STREAM_PUBLISHERS):
            publisher = ""
        if (by is None or publisher not in by) and sum(map(len, self.counts.values())) >= MAX_TALLIED:
            if by is None or "" not in by:
                return  # past every bound: left out (the stream's own objectives still count it)
            publisher = ""
        found = self.counts.setdefault(stream, {}).setdefault(publisher, [0, 0])
        found[0] += batches
        found[1] += messages
