"""Which connection publishes each tapped fast batch: one CONNZ request per new reply prefix.

The tap sees replies on `<prefix>.<batch>.<flow>.<gap>.<seq>.<op>.$FI`; the publisher is the one
connection of the collector's account subscribed to that subject. A prefix is a connection's own
(`_INBOX.<nuid>`, nats-py), unless it is one the tap is configured with (`_INBOX`, nats.js, which
subscribes `_INBOX.<batch>.>` per batch): then each batch is its own question. An atomic batch's
first message is a request: its reply subject names the connection the same way. With the system account, the
collector asks every server (`$SYS.REQ.SERVER.PING.CONNZ`, filtered by account and subject) and
keeps the answer per prefix: a prefix is asked once (an answer of nobody at its next batch), at once for a burst
of new prefixes and then at most `per_second` a second, and a bounded number of prefixes and batches
are remembered. The server names a connection by its subscriptions: a publisher whose reply
subscription is already gone when it is asked (a batch over within milliseconds, then unsubscribed)
stays unknown. A question no server answers in time (a loaded system) is asked again, waiting longer.
Without the system account nothing is asked and the status says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Callable

from console.backoff import Backoff
from console.broker.connection import Connection
from console.broker.server_info import NoAnswer, ask_connz
from console.domain.events import BatchEvent
from console.domain.publisher import NO_SYSTEM_ACCOUNT, Publisher
from console.domain.wire import Tally

log = logging.getLogger(__name__)
MAX_PREFIXES = 10_000
MAX_BATCHES = 10_000
# Asked at once, up to this many new prefixes in a burst: a batch that ends within milliseconds takes its
# reply subscription with it, and a connection's subscriptions are what names it.
BURST = 20
ASK_NAMED_AGAIN = 600.0  # seconds an answer naming a connection is kept
ASK_NOBODY_AGAIN = 1.0  # seconds an answer of nobody is kept at least (then asked at the next batch)
# Questions waiting for their turn at most: past them a new prefix stays unknown (a flood of forged
# replies under ever new prefixes would otherwise be a task each, waiting).
MAX_WAITING = 200
# A question no server answered in time (a loaded system) is asked again this many times, each waiting
# twice as long: a publisher left unknown is a conformance row without its name.
ASK_AGAIN = 2


class Publishers:
    def __init__(self, system_nc: Connection | None, account: str | None, *, per_second: float = 20.0,
                 answer_within: float = 1.0, errors: Tally | None = None, shared_prefixes: tuple[str, ...] = (),
                 own: Callable[[], tuple[str | None, int | None]] | None = None):
        """shared_prefixes: the tap's inbox prefixes (a batch directly under one has an inbox of its own);
        own: the collector's connection as CONNZ names it (server, cid), never a publisher."""
        self.system_nc = system_nc
        self.shared_prefixes = frozenset(shared_prefixes)
        self.own = own
        self.account = account  # the tapped replies' account: the collector's own
        self.per_second = per_second
        self.answer_within = answer_within  # seconds to wait for the servers' answers to one request
        self.requests = 0  # CONNZ requests sent
        self.errors = Tally() if errors is None else errors  # the collector's: its status shows them
        self._known: OrderedDict[str, asyncio.Future[Publisher | None]] = OrderedDict()  # prefix -> its Publisher | None
        self._asked: dict[str, float] = {}  # prefix -> when it was last asked
        self._batches: OrderedDict[str, str] = OrderedDict()  # batch id -> its reply prefix
        self._streams: OrderedDict[tuple[str | None, int], str] = OrderedDict()  # (server, cid) -> the stream it last published to
        self._tokens, self._filled = float(BURST), time.monotonic()  # a bucket: a burst at once, then per_second
        self.waiting = 0  # questions waiting for a token
        self.not_asked = 0  # new prefixes left unknown: too many questions were waiting

    @property
    def note(self) -> str:
        """What the pages say where a publisher would be, when none can be known."""
        if self.system_nc is None:
            return NO_SYSTEM_ACCOUNT
        return "" if self.account else "publisher unknown: the collector's account is not known"

    @property
    def known(self) -> int:
        return sum(1 for f in self._known.values() if f.done() and f.result() is not None)

    def saw(self, subject: str) -> None:
        """A tapped reply: remember its batch's prefix, and ask who holds a new prefix."""
        if self.system_nc is None or not self.account:
            return
        tokens = subject.rsplit(".", 6)
        if len(tokens) == 7 and tokens[0] and tokens[1]:
            self._saw(tokens[1], self.connection_key("fast", tokens[0], tokens[1]), subject)

    def saw_atomic(self, batch_id: str, reply: str) -> None:
        """An atomic batch's first message, sent as a request on `reply`."""
        if self.system_nc is not None and self.account and "." in reply:
            self._saw(batch_id, self.connection_key("atomic", reply.rsplit(".", 1)[0], batch_id), reply)

    def connection_key(self, kind: str, prefix: str, batch_id: str) -> str:
        """What a reply prefix says of its connection: the prefix, or prefix.batch under a shared one."""
        return f"{prefix}.{batch_id}" if kind == "fast" and prefix in self.shared_prefixes else prefix

    def lookup(self, kind: str, prefix: str, batch_id: str) -> Publisher | None:
        """The publisher of a batch as already answered (never waits): the conformance grader's question."""
        future = self._known.get(self.connection_key(kind, prefix, batch_id))
        return future.result() if future is not None and future.done() else None

    def asking(self, kind: str, prefix: str, batch_id: str) -> bool:
        """Whether the servers are still being asked who published the batch."""
        future = self._known.get(self.connection_key(kind, prefix, batch_id))
        return future is not None and not future.done()

    def _saw(self, batch_id: str, key: str, subject: str) -> None:
        new_batch = batch_id not in self._batches
        self._batches[batch_id] = key
        self._batches.move_to_end(batch_id)
        while len(self._batches) > MAX_BATCHES:
            self._batches.popitem(last=False)
        known = self._known.get(key)
        if known is None or self._stale(key, known, new_batch):
            if self.waiting >= MAX_WAITING:
                self.not_asked += 1
                self.errors.add("CONNZ: too many questions waiting, a publisher left unknown")
                return
            future = asyncio.get_running_loop().create_future()
            self._known[key] = future
            self._asked[key] = time.monotonic()
            while len(self._known) > MAX_PREFIXES:
                self._asked.pop(self._known.popitem(last=False)[0], None)
            self.waiting += 1  # counted from now: a task made is not yet running
            asyncio.create_task(self._ask(key, subject, future))

    def _stale(self, prefix: str, known: asyncio.Future[Publisher | None], new_batch: bool) -> bool:
        """A prefix may be a connection's (ours is: one per connection): an answer naming it is asked
        again after a while (a reconnect gives a new connection id); an answer of nobody (its batch was
        over and unsubscribed before the question) at the prefix's next batch."""
        if not known.done():
            return False
        age = time.monotonic() - self._asked.get(prefix, 0.0)
        if known.result() is not None:
            return age > ASK_NAMED_AGAIN
        return new_batch and age > ASK_NOBODY_AGAIN

    async def stamp(self, events: list[BatchEvent]) -> list[BatchEvent]:
        """The events with their batch's publisher, waiting together for the answers still on their way as
        long as one ask may take (its tries, each waiting longer: a busy server answers the second)."""
        futures = [self._known.get(prefix) if (prefix := self._batches.get(event.batch_id or "")) else None
                   for event in events]
        pending = {f for f, e in zip(futures, events) if f is not None and not f.done() and e.publisher is None}
        if pending:
            await asyncio.wait(pending, timeout=self.asked_within)
        out = []
        for event, future in zip(events, futures):
            if future is not None and future.done() and event.publisher is None:
                if (publisher := future.result()) is not None:
                    event = event.but(publisher=publisher)
            out.append(self._with_probable_stream(event))
        return out

    @property
    def asked_within(self) -> float:
        """The longest one ask takes: each of its tries waits twice the one before, from answer_within (a
        stamp that waited two of them wrote a nats.js publisher's loss unnamed on a loaded CI machine)."""
        tries = self._tries()
        return sum(tries.after(n) for n in range(1, ASK_AGAIN + 2))

    def _tries(self) -> Backoff:
        return Backoff(first=self.answer_within, most=self.answer_within * 2 ** ASK_AGAIN)

    def _with_probable_stream(self, event: BatchEvent) -> BatchEvent:
        """Learn which stream a connection publishes to; where an event's own stream is not known, give
        the connection's last one as probable (fast-ingest flow acks and errors never name it)."""
        if event.publisher is None or event.publisher.cid is None:
            return event
        connection = (event.publisher.server, event.publisher.cid)
        if event.stream:
            self._streams[connection] = event.stream
            self._streams.move_to_end(connection)
            while len(self._streams) > MAX_PREFIXES:
                self._streams.popitem(last=False)
            return event
        probable = self._streams.get(connection)
        return event.but(probable_stream=probable) if probable else event

    def _take_token(self) -> bool:
        now = time.monotonic()
        self._tokens = min(BURST, self._tokens + (now - self._filled) * self.per_second)
        self._filled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    async def _ask(self, prefix: str, subject: str, future: asyncio.Future[Publisher | None]) -> None:
        found: Publisher | None = None
        waited = False
        try:
            while not self._take_token():
                await asyncio.sleep(1 / self.per_second)
            self.waiting, waited = self.waiting - 1, True
            self.requests += 1
            if self.system_nc is None or self.account is None:
                raise ValueError("no system account to ask")  # _saw asks only with one
            longer = self._tries()  # a busy server answers a later try
            for attempt in range(ASK_AGAIN + 1):
                try:
                    found = await ask_connz(self.system_nc, self.account, prefix, subject, longer.wait(), self.errors,
                                            exclude=self.own() if self.own else None)
                    break
                except NoAnswer:
                    if attempt == ASK_AGAIN:
                        raise
                    self.requests += 1
        except Exception as e:  # an answer we cannot read leaves the publisher unknown, never the tap
            self.errors.add(f"CONNZ: {type(e).__name__}")
            log.debug("CONNZ for %s: %s", prefix, e)
        finally:
            if not waited:
                self.waiting -= 1
            if not future.done():
                future.set_result(found)
