"""The collector's conformance grading: the taps hand it what they see, the ticker folds what ended and
writes each client whose verdict changed to the event log (a CONFORMANCE event: the client as the
publisher, its verdict as the detail), where the page, the CLI, the checks and Incident read it.

Off (`--no-grade-publishers`), nothing is graded. Which client a batch is comes from the collector's
CONNZ answers (Publishers); without the system account every client is "(publisher unknown)".
"""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta
from bisect import bisect_left
from operator import itemgetter
from typing import Any, Callable

from console.broker.capture import Inbound
from console.collector.publishers import Publishers
from console.collector.state import now
from console.domain.atomic_tracker import BATCH_ID
from console.domain.events import COLLECTOR, BatchEvent, EventKind
from console.domain.grader import Grader

Put = Callable[[list[BatchEvent], str], None]
REPLY, FAST, ATOMIC, REFUSED = "reply", "fast", "atomic", "refused"
MAX_PENDING = 500_000  # inputs held for ordering at most; past it they are graded as handled
MAX_TOLD = 200  # verdicts written a pass at most (a new failure first, each client's counts now and then)
AGAIN_AFTER_PASSES = 12  # a client's counts are written again this many passes later (a minute by default)


class Grading:
    def __init__(self, publishers: Publishers, instance: str, batch_timeout: float, every: float,
                 first_unhanded: Callable[[], int | None]):
        self.publishers = publishers
        self.grader = Grader(batch_timeout, max_batch_size=None, resolve=publishers.lookup,
                             asking=publishers.asking)
        self.instance = instance
        self.every = every
        self.written = 0
        self.behind = 0  # inputs graded out of the wire's order: the collector fell far behind
        self._last = time.monotonic()
        self._pending: list[tuple[Any, ...]] = []  # (arrival, what, ...) in the order handled, graded in the wire's
        self._first_unhanded = first_unhanded  # the taps' lowest arrival not handed over yet (None: all were)

    # What the taps hand over, as they handle it; graded in the order the server sent it (see ArrivalMsg).

    def reply(self, msg: Inbound) -> None:  # its parts, not the message: a tuple of them is no work for the GC
        self._pending.append((msg.arrival, REPLY, msg.subject, msg.data, msg.no_responders))

    def fast_message(self, msg: Inbound) -> None:
        self._pending.append((msg.arrival, FAST, msg))

    def atomic_message(self, msg: Inbound, stream: str | None) -> None:
        self._pending.append((msg.arrival, ATOMIC, msg, stream))
        batch_id = msg.batch_headers.get(BATCH_ID, "")
        if msg.reply and batch_id:  # who it is, asked now: the inbox may be gone by its end
            self.publishers.saw_atomic(batch_id, msg.reply)

    def refused(self, events: list[BatchEvent], arrival: int) -> None:
        """The atomic watch's 10210s: a first message refused for too many batches in flight."""
        for event in events:
            if event.kind is EventKind.ATOMIC_REJECTED and event.batch_id:
                self._pending.append((arrival, REFUSED, event))

    def grade(self, everything: bool = False) -> None:
        """Grade, in the wire's order, every input that arrived before the first one a tap's task has not
        handed over yet: however far one task is behind the others, nothing it still holds is overtaken."""
        pending = self._pending
        cut = None if everything or len(pending) > MAX_PENDING else self._first_unhanded()
        if len(pending) > MAX_PENDING:
            self.behind += len(pending)
            self.publishers.errors.add("conformance: fell behind, inputs graded out of the wire's order")
        pending.sort(key=_arrival)
        split = len(pending) if cut is None else bisect_left(pending, cut, key=_arrival)
        ready, self._pending = pending[:split], pending[split:]
        g, at = self.grader, now()
        for item in ready:
            what = item[1]
            if what is REPLY:
                g.reply(item[2], item[3], at, item[4])
            elif what is FAST:
                g.fast_message(item[2].reply, at)
            elif what is ATOMIC:
                g.atomic_message(item[2].batch_headers, item[2].reply, item[3], at)
            else:
                g.atomic_refused(item[2].batch_id, at)

    def tick(self, put: Put, everything: bool = False) -> None:
        """Grade; every `every` seconds (or now, everything folded: a stop), the verdicts that changed."""
        self.grade(everything)
        if not everything and time.monotonic() - self._last < self.every:
            return
        self._last = time.monotonic()
        if everything:
            self.grader.fold_all()
        else:
            self.grader.tick(now())
        events = []
        told = self.grader.verdicts(now=None if everything else now(), limit=None if everything else MAX_TOLD,
                                    again_after=timedelta(seconds=AGAIN_AFTER_PASSES * self.every))
        for verdict in told:
            self.written += 1
            client = hashlib.sha256(verdict.key.encode()).hexdigest()[:16]
            events.append(BatchEvent(f"conformance.{self.instance}.{client}.{self.written}", EventKind.CONFORMANCE,
                                     now(), publisher=verdict.publisher, detail=verdict.to_json(),
                                     reason=f"{len(verdict.failing)} failing"))
        if events:
            put(events, COLLECTOR)


_arrival = itemgetter(0)  # an input's place in the wire's order
