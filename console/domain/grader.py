"""Grading batch publishers against the conformance statements, from what the collector sees on the
wire: the server's replies on `$FI` subjects, the publish side when tapped, and the replies to atomic
batches' first messages. Pure and bounded: a rolling window of batches (past MAX_BATCHES the oldest
is folded early), folded into a bounded set of clients once a batch has ended and lingered (refusals
of what was in flight arrive after the end) or gone quiet.

A batch is graded by the connection's reply prefix; which client that is comes from CONNZ, asked by
the collector, and is looked up at fold time (`resolve`). Subjects are read loosely here, since a
subject the server refuses (an id too long, a start at another sequence) is itself the evidence.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Mapping

from console.domain.atomic_tracker import BATCH_COMMIT, BATCH_ID, BATCH_SEQUENCE
from console.domain.conformance import MAX_EXAMPLES, ClientVerdict, Example, Tallies, client_key
from console.domain.publisher import Publisher
from console.domain.replies import PLAIN_ACK, ApiError, FlowAck, FlowError, MalformedReply, PubAck, Reply, to_reply
from console.domain.statements import hooked
from console.domain.statements.base import (
    BACKOFF_RATE, ON_PUBLISH_SIDE, ON_REPLIES, TOO_MANY_FAST, UNKNOWN_BATCH, Graded,
)
from console.domain.wire import has_control

MAX_BATCHES = 10_000
MAX_CLIENTS = 10_000
MAX_PREFIXES = 10_000
LINGER = timedelta(seconds=3)  # an ended batch is kept this long for the refusals of what was in flight
ASKING_AT_MOST = timedelta(seconds=30)  # and up to this long while who published it is still being asked
QUIET = timedelta(seconds=5)  # a batch without news this long (and 3 batch timeouts) is folded as it stands
MAX_ID = 128  # longer ids are kept cut (an id over 64 is already a failure)
Resolve = Callable[[str, str, str], Publisher | None]  # (kind, reply prefix, batch id) -> who
Asking = Callable[[str, str, str], bool]  # (kind, reply prefix, batch id) -> who it is still being asked
# Each hook's statements, once: the grader calls a statement only where it grades something
FAST_ID, FAST_SUBJECT, FAST_START, ENDED = (hooked(h) for h in ("on_fast_id", "on_fast_subject", "on_fast_start",
                                                                 "on_ended"))
SERVER_ERROR, PING_ACKED, UNKNOWN = (hooked(h) for h in ("on_server_error", "on_ping_acked", "on_unknown_batch"))
FAST_SENT, ATOMIC_FIRST, ATOMIC_AGAIN = (hooked(h) for h in ("on_fast_sent", "on_atomic_first", "on_atomic_again"))
ATOMIC_SENT, ATOMIC_COMMIT, BUSY = (hooked(h) for h in ("on_atomic_sent", "on_atomic_commit", "on_busy"))


@dataclass
class _Client:
    publisher: Publisher | None
    since: datetime
    until: datetime
    batches: int = 0
    publish_side: bool = False
    results: dict[str, Tallies] = field(default_factory=dict)
    told: tuple[datetime, tuple[str, ...]] | None = None  # when its verdict was last given out, failing what

    def failing(self) -> tuple[str, ...]:
        """Statements it fails, confirmed or not: a new one is told first."""
        return tuple(s for s, t in self.results.items() if t.failed or t.unconfirmed)


class Grader:
    def __init__(self, batch_timeout: float = 10.0, max_batch_size: int | None = 1000,
                 max_batches: int = MAX_BATCHES, max_clients: int = MAX_CLIENTS, resolve: Resolve | None = None,
                 asking: Asking | None = None):
        self.resolve: Resolve = resolve or _nobody
        self.asking: Asking = asking or (lambda _kind, _prefix, _batch: False)
        self.batch_timeout = timedelta(seconds=batch_timeout)
        self.max_batch_size = max_batch_size  # None: not known, A06 is not graded
        self.max_batches, self.max_clients = max_batches, max_clients
        self.batches: OrderedDict[tuple[str, str], Graded] = OrderedDict()
        self.clients: OrderedDict[str, _Client] = OrderedDict()
        self.changed: set[str] = set()  # clients whose verdict changed since verdicts() was last asked
        self._refusals: OrderedDict[str, list[int]] = OrderedDict()  # prefix -> [second, count, seconds over]
        self.graded = 0  # batches folded
        # As the tracker: a reply prefix (one publisher, or one forger) holds at most a quarter of the batches
        # graded; a new batch past that, seen only in replies, is not graded (counted)
        self.max_per_prefix = max(1, max_batches // 4)
        self._per_prefix: Counter[str] = Counter()
        self.not_graded = 0

    # -- the fast-ingest reply side ----------------------------------------------------------

    def reply(self, subject: str, data: bytes, now: datetime, no_responders: bool = False) -> bool:
        """One tapped `$FI` reply (a 503 status: no_responders); whether its batch is new here. Never raises."""
        tokens = subject.rsplit(".", 6)
        if len(tokens) != 7 or tokens[6] != "$FI" or not tokens[0]:
            return False
        prefix, bid, flow, gap, seq_s, op = tokens[:6]
        if not bid:
            return False
        known = self.batches.get(("fast", bid[:MAX_ID]))
        new = known is None
        if new and self._per_prefix.get(prefix, 0) >= self.max_per_prefix:  # one forger's new ids crowd out
            self.not_graded += 1  # no one (and are counted before their body is read)
            return False
        plain = PLAIN_ACK.fullmatch(data) if not no_responders else None
        if plain is not None and op == "1" and known is not None and len(bid) <= MAX_ID:
            known.last = known.last_reply = now  # the hot path: one plain ack of a batch already graded
            known.answered = True
            known.acked = max(known.acked, int(plain[1]))
            known.granted = int(plain[2]) or known.granted
            return False
        if not (seq_s.isascii() and seq_s.isdigit()) or len(seq_s) > 18:
            return False
        seq = int(seq_s)
        if no_responders:
            return False  # the server's 503 goes to the publisher alone: one here is not the server's
        try:
            reply = to_reply(data) if plain is None else FlowAck(int(plain[1]), int(plain[2]))
        except MalformedReply:
            return False  # not a reply: evidence of nothing (and no batch made for it)
        batch = self._fast(bid, prefix, now, ON_REPLIES)
        batch.last_reply = now
        self._subject(batch, prefix, flow, gap)
        self._reply(batch, bid, op, seq, reply, now)
        return new

    def _reply(self, batch: Graded, bid: str, op: str, seq: int, reply: Reply, now: datetime) -> None:
        if op == "0" and not (isinstance(reply, FlowAck) and reply.seq):  # a start's own answer (at a flow of
            self._start(batch, seq, "reply")  # 1 the start's message is acknowledged on its subject again)
        code = reply.err_code if isinstance(reply, ApiError) else \
            reply.error.err_code if isinstance(reply, FlowError) else None
        if code == UNKNOWN_BATCH:
            return self._refused(batch, seq, now)
        if code == TOO_MANY_FAST:
            return self.too_many(batch, now)
        if code is not None:
            for statement in SERVER_ERROR:
                statement.on_server_error(batch, bid, code)
        if isinstance(reply, FlowAck):
            batch.answered = True
            batch.acked = max(batch.acked, reply.seq)
            batch.granted = reply.msgs
            if op == "4":
                for statement in PING_ACKED:
                    statement.on_ping_acked(batch, seq)
        elif isinstance(reply, PubAck):
            batch.stream = reply.stream
            batch.answered = True
            if op in ("2", "3"):
                self._end(batch, "commit", seq, now)
            else:  # fail mode ended the batch at a gap or an error
                self._end(batch, "fail_end", seq, now)
        elif isinstance(reply, ApiError):
            batch.stream = batch.stream or reply.stream
            batch.answered = True

    def _fast(self, bid: str, prefix: str, now: datetime, source: str) -> Graded:
        key = ("fast", bid[:MAX_ID])
        batch = self.batches.get(key)
        if batch is None:
            batch = self._admit(key, Graded("fast", bid[:MAX_ID], prefix, now, now))
        batch.source = source
        for statement in FAST_ID:
            statement.on_fast_id(batch, bid)
        batch.last = now
        return batch

    def _subject(self, batch: Graded, prefix: str, flow: str, gap: str) -> None:
        if batch.tokens is None:
            batch.tokens = (prefix, flow, gap)
            batch.requested = int(flow) if flow.isascii() and flow.isdigit() and len(flow) <= 5 else 0
            return
        for statement in FAST_SUBJECT:
            statement.on_fast_subject(batch, (prefix, flow, gap))

    def _start(self, batch: Graded, seq: int, seen_by: str) -> None:
        times = batch.starts.get(seen_by, 0) + 1
        batch.starts[seen_by] = times
        for statement in FAST_START:
            statement.on_fast_start(batch, seq, times)

    def _refused(self, batch: Graded, seq: int, now: datetime) -> None:
        """10208: the server does not know the batch (idle past the timeout, a new leader, or ended)."""
        for statement in UNKNOWN:
            statement.on_unknown_batch(batch, seq, now, self)
        if batch.ended is None:
            self._end(batch, "refused", seq, now)

    def _end(self, batch: Graded, how: str, seq: int, now: datetime) -> None:
        if batch.ended is None:
            batch.ended, batch.ended_at, batch.end_seq = how, now, seq
            for statement in ENDED:
                statement.on_ended(batch, how)

    # -- the publish side ---------------------------------------------------------------------

    def fast_message(self, reply: str, now: datetime) -> bool:
        """A fast batch's message as published (its reply subject says what it is); whether its batch
        is new here."""
        tokens = reply.rsplit(".", 6)
        if len(tokens) != 7 or tokens[6] != "$FI" or not tokens[0]:
            return False
        prefix, bid, flow, gap, seq_s, op = tokens[:6]
        if not bid or not (seq_s.isascii() and seq_s.isdigit()) or len(seq_s) > 18:
            return False
        seq = int(seq_s)
        new = ("fast", bid[:MAX_ID]) not in self.batches
        batch = self._fast(bid, prefix, now, ON_PUBLISH_SIDE)
        batch.publish_side = True
        self._subject(batch, prefix, flow, gap)
        for statement in FAST_SENT:
            statement.on_fast_sent(batch, seq, op, now, self)
        batch.last_sent = now
        if op == "0":
            self._start(batch, seq, "publish")
        if op != "4":  # a ping repeats a sequence sent; one above it is F07's failure, not a message sent
            batch.sent = max(batch.sent, seq)
        return new

    def atomic_message(self, headers: Mapping[str, str], reply: str | None, stream: str | None,
                       now: datetime) -> str | None:
        """An atomic batch's message as published; the reply prefix of its connection when it is a
        first message with a reply (for the collector to ask who it is)."""
        raw_id = headers.get(BATCH_ID)
        if not raw_id:
            return None
        prefix = reply.rsplit(".", 1)[0] if reply and "." in reply else ""
        key = ("atomic", raw_id[:MAX_ID])
        batch = self.batches.get(key)
        seq_text = headers.get(BATCH_SEQUENCE, "")
        seq = int(seq_text) if seq_text.isascii() and seq_text.isdigit() and len(seq_text) <= 18 else None
        if batch is not None:
            for statement in ATOMIC_AGAIN:
                statement.on_atomic_again(batch, seq)
        if batch is None or (seq == 1 and batch.ended is not None):
            if batch is not None:
                self._fold(key, batch)
            batch = self._admit(key, Graded("atomic", raw_id[:MAX_ID], prefix, now, now, stream=stream,
                                            source=ON_PUBLISH_SIDE))
            for statement in ATOMIC_FIRST:
                statement.on_atomic_first(batch, raw_id, seq)
        batch.last, batch.publish_side, batch.source = now, True, ON_PUBLISH_SIDE
        batch.stream = batch.stream or stream
        if prefix and not batch.prefix:
            batch.prefix = prefix
        for statement in ATOMIC_SENT:
            statement.on_atomic_sent(batch, seq, seq_text, reply, headers, self)
        if seq is None:
            return None
        if seq == 1:
            batch.starts["publish"] = 1
            batch.sent = 0  # a batch started (again): its sequence counts from here
        batch.sent = max(batch.sent, seq)
        if (commit := headers.get(BATCH_COMMIT)) is not None:
            for statement in ATOMIC_COMMIT:
                statement.on_atomic_commit(batch, commit, seq, headers)
            self._end(batch, "commit", seq, now)
        return prefix if seq == 1 and prefix else None

    def atomic_refused(self, batch_id: str, now: datetime) -> None:
        """A first message refused 10210 (too many atomic batches in flight)."""
        if (batch := self.batches.get(("atomic", batch_id[:MAX_ID]))) is not None:
            self.too_many(batch, now)
            self._end(batch, "refused", 1, now)

    def too_many(self, batch: Graded, now: datetime) -> None:
        """A 429: the client's refusals are counted per second; a run of busy seconds is no back-off."""
        second = int(now.timestamp())
        state = self._refusals.pop(batch.prefix, None) or [second, 0, 0]
        self._refusals[batch.prefix] = state
        if len(self._refusals) > MAX_PREFIXES:
            self._refusals.popitem(last=False)
        if state[0] != second:
            state[2] = state[2] + 1 if state[1] > BACKOFF_RATE and second == state[0] + 1 else 0
            state[0], state[1] = second, 0
        state[1] += 1
        # the 429 is a reply (forgeable); the retry it answers, when seen sent, is the client's own doing
        batch.source = ON_PUBLISH_SIDE if batch.starts.get("publish") else ON_REPLIES
        for statement in BUSY:
            statement.on_busy(batch, state[1], state[2])

    # -- folding into clients ----------------------------------------------------------------

    def learn(self, batch_timeout: float | None = None, max_batch_size: int | None = None) -> None:
        if batch_timeout is not None:
            self.batch_timeout = timedelta(seconds=batch_timeout)
        if max_batch_size is not None:
            self.max_batch_size = max_batch_size

    def set_stream(self, batch_id: str, stream: str) -> None:
        if (batch := self.batches.get(("fast", batch_id[:MAX_ID]))) is not None and batch.stream is None:
            batch.stream = stream

    def tick(self, now: datetime) -> None:
        """Fold the batches that ended and lingered, or went quiet (the server has dropped them by then)."""
        quiet = max(QUIET, 3 * self.batch_timeout)
        for key, batch in list(self.batches.items()):
            if (batch.ended_at is not None and now - batch.ended_at > LINGER) or now - batch.last > quiet:
                # folded under the client the servers name: a busy server's answer is waited for, boundedly
                if batch.prefix and now - batch.last < ASKING_AT_MOST and \
                        self.asking(batch.kind, batch.prefix, batch.batch_id):
                    continue
                self._fold(key, batch)

    def fold_all(self) -> None:
        """Everything graded so far, folded as it stands (the collector is stopping)."""
        for key, batch in list(self.batches.items()):
            self._fold(key, batch)

    def _admit(self, key: tuple[str, str], batch: Graded) -> Graded:
        self.batches[key] = batch
        self._per_prefix[batch.prefix] += 1
        while len(self.batches) > self.max_batches:
            old_key, old = next(iter(self.batches.items()))
            self._fold(old_key, old)
        return batch

    def _fold(self, key: tuple[str, str], batch: Graded) -> None:
        if self.batches.pop(key, None) is not None:
            self._per_prefix[batch.prefix] -= 1
            if not self._per_prefix[batch.prefix]:
                del self._per_prefix[batch.prefix]
        if not batch.results:
            return
        self.graded += 1
        publisher = self.resolve(batch.kind, batch.prefix, batch.batch_id) if batch.prefix else None
        name = client_key(publisher)
        client = self.clients.pop(name, None) or _Client(publisher, batch.first, batch.last)
        self.clients[name] = client
        while len(self.clients) > self.max_clients:
            self.changed.discard(self.clients.popitem(last=False)[0])
        client.publisher = publisher or client.publisher
        client.since, client.until = min(client.since, batch.first), max(client.until, batch.last)
        client.batches += 1
        client.publish_side = client.publish_side or batch.publish_side
        for statement, why in batch.results.items():
            tallies = client.results.setdefault(statement, Tallies())
            if why is None:
                tallies.passed += 1
                continue
            rests_on = batch.rests_on.get(statement, ON_REPLIES)
            if rests_on == ON_REPLIES:
                tallies.unconfirmed += 1
                if batch.contradicted(statement):
                    why += "; the publish side saw otherwise: the replies were likely forged"
            else:
                tallies.failed += 1
            example = Example(_printable(batch.batch_id), batch.stream and _printable(batch.stream), _iso(batch.last),
                              _printable(why), rests_on)
            tallies.examples = (tallies.examples + [example])[-MAX_EXAMPLES:]
        self.changed.add(name)

    def verdicts(self, changed_only: bool = True, now: datetime | None = None, limit: int | None = None,
                 again_after: timedelta = timedelta(0)) -> list[ClientVerdict]:
        """The verdicts to give out: of clients that changed (every client, without changed_only). With
        `now`: a client's new failure at once, its counts only `again_after` its last verdict, at most
        `limit` (the rest wait their turn): ten thousand busy clients are not ten thousand events a pass."""
        if not changed_only:
            return [self.verdict(n) for n in self.clients]
        out: list[str] = []

        def urgency(name: str) -> int:  # a failure not told yet, then a client never told, then counts
            c = self.clients[name]
            failing = c.failing()
            return 0 if failing and (c.told is None or c.told[1] != failing) else 1 if c.told is None else 2

        for name in sorted((n for n in self.clients if n in self.changed), key=urgency):
            c = self.clients[name]
            failing = c.failing()
            due = now is None or c.told is None or c.told[1] != failing or now - c.told[0] >= again_after
            if due and (limit is None or len(out) < limit):
                out.append(name)
                c.told = (now or c.until, failing)
                self.changed.discard(name)
        self.changed &= set(self.clients)
        return [self.verdict(n) for n in out]

    def verdict(self, name: str) -> ClientVerdict:
        c = self.clients[name]
        return ClientVerdict(name, c.publisher, c.batches, c.publish_side,
                             {s: Tallies(t.passed, t.failed, list(t.examples), t.unconfirmed)
                              for s, t in c.results.items()},
                             _iso(c.since), _iso(c.until))


def _nobody(_kind: str, _prefix: str, _batch: str) -> Publisher | None:
    return None


def _printable(text: str) -> str:
    """What came from the wire, fit for a verdict its readers take (control characters shown as '?')."""
    return "".join("?" if has_control(c) else c for c in text) or "?"


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")
