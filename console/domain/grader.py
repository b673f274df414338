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

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Mapping

from console.domain.atomic_tracker import BATCH_COMMIT, BATCH_ID, BATCH_SEQUENCE, REQUIRED_API_LEVEL
from console.domain.conformance import (
    BACKOFF_RATE, BACKOFF_SECONDS, MAX_EXAMPLES, ON_PUBLISH_SIDE, ON_REPLIES, SLACK_WINDOWS, WINDOWS, ClientVerdict,
    Example, Tallies, client_key,
)
from console.domain.publisher import Publisher
from console.domain.replies import ApiError, FlowAck, FlowError, MalformedReply, PubAck, Reply, to_reply
from console.domain.wire import has_control

MAX_BATCHES = 10_000
MAX_CLIENTS = 10_000
MAX_PREFIXES = 10_000
LINGER = timedelta(seconds=3)  # an ended batch is kept this long for the refusals of what was in flight
QUIET = timedelta(seconds=5)  # a batch without news this long (and 3 batch timeouts) is folded as it stands
MAX_ID = 128  # longer ids are kept cut (an id over 64 is already a failure)
UNKNOWN_BATCH, TOO_MANY_FAST, TOO_MANY_ATOMIC, INVALID_ID = 10208, 10211, 10210, 10207
_PLAIN_ACK = re.compile(rb'\{"type":"ack","seq":(\d{1,18}),"msgs":(\d{1,5})\}')
Resolve = Callable[[str, str, str], Publisher | None]  # (kind, reply prefix, batch id) -> who


@dataclass
class Graded:
    """One batch: what was seen of it, and each statement's result (a failure sticks)."""

    kind: str  # "fast" | "atomic"
    batch_id: str
    prefix: str
    first: datetime
    last: datetime
    stream: str | None = None
    results: dict[str, str | None] = field(default_factory=dict)  # statement -> None (pass) | why it failed
    ended: str | None = None  # "commit" | "refused" | "fail_end"
    ended_at: datetime | None = None
    end_seq: int = 0
    publish_side: bool = False
    # fast
    tokens: tuple[str, str, str] | None = None  # prefix, flow, gap mode of the first message seen
    requested: int = 0
    granted: int = 0
    acked: int = 0
    answered: bool = False  # the start had a reply
    starts: dict[str, int] = field(default_factory=dict)  # where a start was seen ("reply", "publish") -> times
    sent: int = 0  # highest sequence seen on the publish side
    last_sent: datetime | None = None
    last_reply: datetime | None = None
    # What the statements' results rest on: replies on the publisher's inbox, which any client of the
    # account may publish, or the publish side; a failure only replies show is unconfirmed
    source: str = ON_REPLIES  # what is being read now
    rests_on: dict[str, str] = field(default_factory=dict)  # a failing statement -> what shows it
    passed_on_publish_side: set[str] = field(default_factory=set)

    def passes(self, statement: str) -> None:
        self.results.setdefault(statement, None)
        if self.source == ON_PUBLISH_SIDE:
            self.passed_on_publish_side.add(statement)

    def fails(self, statement: str, why: str) -> None:
        if self.results.get(statement) is None or \
                (self.source == ON_PUBLISH_SIDE and self.rests_on.get(statement) == ON_REPLIES):
            self.results[statement] = why[:300]
            self.rests_on[statement] = self.source

    def contradicted(self, statement: str) -> bool:
        """Failing on replies alone while the publish side saw it pass."""
        return self.rests_on.get(statement) == ON_REPLIES and statement in self.passed_on_publish_side


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
                 max_batches: int = MAX_BATCHES, max_clients: int = MAX_CLIENTS, resolve: Resolve | None = None):
        self.resolve: Resolve = resolve or _nobody
        self.batch_timeout = timedelta(seconds=batch_timeout)
        self.max_batch_size = max_batch_size  # None: not known, A06 is not graded
        self.max_batches, self.max_clients = max_batches, max_clients
        self.batches: OrderedDict[tuple[str, str], Graded] = OrderedDict()
        self.clients: OrderedDict[str, _Client] = OrderedDict()
        self.changed: set[str] = set()  # clients whose verdict changed since verdicts() was last asked
        self._refusals: OrderedDict[str, list[int]] = OrderedDict()  # prefix -> [second, count, seconds over]
        self.graded = 0  # batches folded

    # -- the fast-ingest reply side ----------------------------------------------------------

    def reply(self, subject: str, data: bytes, now: datetime, no_responders: bool = False) -> bool:
        """One tapped `$FI` reply (a 503 status: no_responders); whether its batch is new here. Never raises."""
        tokens = subject.rsplit(".", 6)
        if len(tokens) != 7 or tokens[6] != "$FI" or not tokens[0]:
            return False
        prefix, bid, flow, gap, seq_s, op = tokens[:6]
        if not bid:
            return False
        plain = _PLAIN_ACK.fullmatch(data) if not no_responders else None
        if plain is not None and op == "1" and (known := self.batches.get(("fast", bid))) is not None:
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
        new = ("fast", bid[:MAX_ID]) not in self.batches
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
        if code == INVALID_ID:
            batch.fails("F11", f"an id of {len(bid)} characters, refused 10207")
        if isinstance(reply, FlowAck):
            batch.answered = True
            batch.acked = max(batch.acked, reply.seq)
            batch.granted = reply.msgs
            if op == "4":
                if seq < batch.acked:
                    batch.fails("F07", f"a ping at {seq}, below {batch.acked} the server had acknowledged")
                else:
                    batch.passes("F07")
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
        if len(bid) > 64:  # on each side that sees it: the publish side confirms what a reply says
            batch.fails("F11", f"an id of {len(bid)} characters")
        else:
            batch.passes("F11")
        batch.last = now
        return batch

    def _subject(self, batch: Graded, prefix: str, flow: str, gap: str) -> None:
        if batch.tokens is None:
            batch.tokens = (prefix, flow, gap)
            batch.requested = int(flow) if flow.isascii() and flow.isdigit() and len(flow) <= 5 else 0
        elif batch.tokens != (prefix, flow, gap):
            batch.fails("F04", f"started as {'.'.join(batch.tokens)[-80:]}, then {prefix[-40:]}.{flow}.{gap}")
        else:
            batch.passes("F04")

    def _start(self, batch: Graded, seq: int, seen_by: str) -> None:
        if seq != 1:
            batch.fails("F01", f"a start (op 0) at sequence {seq}")
        else:
            batch.passes("F01")
        times = batch.starts.get(seen_by, 0) + 1
        batch.starts[seen_by] = times
        if times > 1 and batch.ended is None:
            batch.fails("F12", "a start naming this id while its batch was open")
        elif times == 1:
            batch.passes("F12")

    def _refused(self, batch: Graded, seq: int, now: datetime) -> None:
        """10208: the server does not know the batch (idle past the timeout, a new leader, or ended)."""
        window = (WINDOWS + SLACK_WINDOWS) * max(batch.requested, 1)
        if batch.ended in ("fail_end", "refused"):
            statement = "F10" if batch.ended == "fail_end" else "F09"
            if seq > batch.end_seq + window:
                batch.fails(statement, f"message {seq} sent after the batch ended at {batch.end_seq} "
                                       f"(in flight: {window})")
            return
        if batch.ended is not None:
            return  # after a commit: no statement
        quiet = [t for t in (batch.last_sent, batch.last_reply) if t is not None and t < now]
        silent = now - max(quiet) if quiet else None
        if silent is not None and silent > self.batch_timeout and batch.starts:
            batch.fails("F08", f"silent {silent.total_seconds():.1f}s (batch timeout "
                               f"{self.batch_timeout.total_seconds():g}s) without a ping, then refused 10208")
        self._end(batch, "refused", seq, now)
        batch.passes("F09")

    def _end(self, batch: Graded, how: str, seq: int, now: datetime) -> None:
        if batch.ended is None:
            batch.ended, batch.ended_at, batch.end_seq = how, now, seq
            if how == "fail_end":
                batch.passes("F10")

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
        window = (WINDOWS + SLACK_WINDOWS) * max(batch.requested, 1)
        if batch.ended in ("fail_end", "refused") and op != "4" and seq > batch.end_seq + window:
            batch.fails("F10" if batch.ended == "fail_end" else "F09",  # what the refusals said, seen sent
                        f"message {seq} sent after the batch ended at {batch.end_seq} (in flight: {window})")
        if batch.last_sent is not None and now - batch.last_sent > self.batch_timeout and batch.ended is None:
            batch.fails("F08", f"silent {(now - batch.last_sent).total_seconds():.1f}s (batch timeout "
                               f"{self.batch_timeout.total_seconds():g}s) without a ping, then went on")
        batch.last_sent = now
        if op == "0":
            self._start(batch, seq, "publish")
            batch.sent = max(batch.sent, seq)
            return new
        if op == "4":
            if seq != batch.sent:
                batch.fails("F07", f"a ping at {seq} when the highest sequence sent was {batch.sent}")
            else:
                batch.passes("F07")
            return new
        if seq == 1 and op == "1":
            batch.fails("F01", "message 1 is an append (op 1), not a start")
        if seq >= 2:
            if not batch.answered and batch.starts.get("publish"):
                batch.fails("F02", f"message {seq} sent before the start was answered")
            elif batch.starts.get("publish"):
                batch.passes("F02")
            if batch.sent and seq != batch.sent + 1:
                batch.fails("F03", f"message {seq} after {batch.sent}")
            elif batch.sent:
                batch.passes("F03")
            if batch.answered and batch.requested and batch.ended is None:  # the window binds a running batch
                outstanding, granted = seq - batch.acked, batch.granted or batch.requested
                if outstanding > (WINDOWS + SLACK_WINDOWS) * batch.requested:
                    batch.fails("F05", f"{outstanding} messages beyond the last ack ({batch.acked}), "
                                       f"asking for a flow of {batch.requested}")
                elif outstanding > (WINDOWS + SLACK_WINDOWS) * granted:
                    batch.fails("F06", f"{outstanding} messages beyond the last ack ({batch.acked}) at a "
                                       f"granted flow of {granted} (asked {batch.requested})")
                else:
                    batch.passes("F05")
                    batch.passes("F06")
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
        if batch is not None and seq == 1 and batch.ended is None:
            batch.fails("A08", "a message 1 naming this id while its batch was open")
        if batch is None or (seq == 1 and batch.ended is not None):
            if batch is not None:
                self._fold(key, batch)
            batch = self._admit(key, Graded("atomic", raw_id[:MAX_ID], prefix, now, now, stream=stream,
                                            source=ON_PUBLISH_SIDE))
            if seq == 1:
                batch.passes("A08")
            if len(raw_id) > 64:
                batch.fails("A05", f"an id of {len(raw_id)} characters")
            else:
                batch.passes("A05")
        batch.last, batch.publish_side, batch.source = now, True, ON_PUBLISH_SIDE
        batch.stream = batch.stream or stream
        if prefix and not batch.prefix:
            batch.prefix = prefix
        if seq is None:
            batch.fails("A02", f"{BATCH_SEQUENCE} {seq_text[:20]!r} is not a number")
            return None
        if seq == 1:
            batch.starts["publish"] = 1
            batch.sent = 0  # a batch started (again): its sequence counts from here
            if reply:
                batch.passes("A01")
            else:
                batch.fails("A01", "message 1 sent without a reply subject")
        elif batch.sent and seq != batch.sent + 1:
            batch.fails("A02", f"message {seq} after {batch.sent}")
        elif batch.sent:
            batch.passes("A02")
        batch.sent = max(batch.sent, seq)
        if self.max_batch_size is not None:
            if seq > self.max_batch_size:
                batch.fails("A06", f"message {seq}, the server's maximum is {self.max_batch_size}")
            elif BATCH_COMMIT in headers:
                batch.passes("A06")
        if (commit := headers.get(BATCH_COMMIT)) is not None:
            self._commit(batch, commit, seq, headers, now)
        return prefix if seq == 1 and prefix else None

    def _commit(self, batch: Graded, commit: str, seq: int, headers: Mapping[str, str], now: datetime) -> None:
        if commit not in ("1", "eob"):
            batch.fails("A03", f"{BATCH_COMMIT}: {commit[:20]!r}")
        else:
            batch.passes("A03")
        if commit == "eob":
            if seq == 1:
                batch.fails("A04", "an eob commit as message 1")
            else:
                batch.passes("A04")
            level = headers.get(REQUIRED_API_LEVEL, "")
            if level.isascii() and level.isdigit() and len(level) < 6 and int(level) >= 3:
                batch.passes("A07")
            else:
                batch.fails("A07", f"an eob commit with {REQUIRED_API_LEVEL} {level[:10]!r}" if level
                            else f"an eob commit without {REQUIRED_API_LEVEL}")
        self._end(batch, "commit", seq, now)

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
        if state[1] > BACKOFF_RATE and state[2] + 1 >= BACKOFF_SECONDS:
            batch.fails("B01", f"refused 429 more than {BACKOFF_RATE} times a second for {state[2] + 1} seconds")
        else:
            batch.passes("B01")

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
                self._fold(key, batch)

    def fold_all(self) -> None:
        """Everything graded so far, folded as it stands (the collector is stopping)."""
        for key, batch in list(self.batches.items()):
            self._fold(key, batch)

    def _admit(self, key: tuple[str, str], batch: Graded) -> Graded:
        self.batches[key] = batch
        while len(self.batches) > self.max_batches:
            old_key, old = next(iter(self.batches.items()))
            self._fold(old_key, old)
        return batch

    def _fold(self, key: tuple[str, str], batch: Graded) -> None:
        self.batches.pop(key, None)
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
