"""Each tapped batch's first and last message as the publish side saw them, held until the batch ends;
a lost batch's two are masked by the rules and go into the event log beside its loss, in one
BATCH_MESSAGES event (console.domain.kept_messages). A batch that ends well is forgotten."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from console.domain.events import LOST_KINDS, BatchEvent, EventKind
from console.domain.kept_messages import KEPT_BYTES, KeptMessage, kept_event
from console.domain.masking import Masking
from console.payloads import Payloads

HELD_BYTES = 16 * 1024 * 1024  # payloads held at most, across batches: the oldest batches go first
HELD_PAYLOAD = 64 * 1024  # of one payload: masking a field needs the message whole; past this it masks it all
# A loss can be read before the publish side's last messages of its batch (two subscriptions, two
# tasks): its messages are written once both the loss and the batch's last tapped message are this old,
# with what came by then; on a loaded collector, whose publish side can trail its losses by seconds, a
# loss waits so up to WAIT_AT_MOST (and then goes without, if nothing of its batch came).
LATE = timedelta(seconds=2)
WAIT_AT_MOST = timedelta(seconds=30)
MAX_LATE = 10_000


@dataclass
class _Seen:
    seq: int
    subject: str
    headers: tuple[tuple[str, str], ...]
    data: bytes
    size: int


@dataclass
class _Open:
    stream: str | None
    first: _Seen
    last: _Seen | None = None
    gapped: bool = False  # an ok-mode gap lost messages: kept if the batch ends at all
    touched: datetime = field(default_factory=lambda: datetime.min)

    @property
    def held(self) -> int:
        return len(self.first.data) + (len(self.last.data) if self.last else 0)


class KeptMessages:
    def __init__(self, payloads: Payloads = Payloads(Masking(), None)):
        self.payloads = payloads  # at the masked level: as a masked role sees the stream's messages
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._late: OrderedDict[str, tuple[BatchEvent, datetime]] = OrderedDict()  # batch -> its loss, when read
        self._held = 0
        # The publish side is tapped: losses wait for their messages. The collector says so as it starts
        # (a loss can come before the first tapped message); a first tapped message says so too.
        self.tapped = False
        self.kept = 0  # BATCH_MESSAGES events made

    def saw(self, batch_id: str, seq: int, stream: str | None, subject: str, headers: tuple[tuple[str, str], ...],
            data: bytes, now: datetime) -> None:
        self.tapped = True
        seen = _Seen(seq, subject, headers, data[:HELD_PAYLOAD], len(data))
        batch = self._open.pop(batch_id, None)
        if batch is None:
            batch = _Open(stream, seen)
        else:
            self._held -= batch.held
            if seq < batch.first.seq:
                batch.first, seen = seen, batch.first
            if batch.last is None or seq >= batch.last.seq:
                batch.last = seen
            batch.stream = batch.stream or stream
        batch.touched = now
        self._open[batch_id] = batch
        self._held += batch.held
        while self._held > HELD_BYTES and len(self._open) > 1:
            self._held -= self._open.popitem(last=False)[1].held

    def wants(self, batch_id: str) -> bool:
        """Whether a message of this batch is still kept: it is held, or its loss waits for it."""
        return batch_id in self._open or batch_id in self._late

    def with_messages(self, events: list[BatchEvent], now: datetime | None = None) -> list[BatchEvent]:
        """`events`; a loss (or the end of a fast batch with a gap) is kept back for LATE, so that the
        messages the publish side had not handed over yet are kept too (tick writes it)."""
        if not self._open and not self.tapped:
            return events
        for event in events:
            if not event.batch_id:
                continue
            batch = self._open.get(event.batch_id)
            if event.kind is EventKind.FAST_GAP and batch is not None:
                batch.gapped = True
            elif event.kind in LOST_KINDS or (event.kind is EventKind.FAST_COMMITTED and batch is not None and
                                              batch.gapped):
                if event.batch_id not in self._late and len(self._late) < MAX_LATE:
                    self._late[event.batch_id] = (event, now or datetime.now(timezone.utc))
            elif event.kind is EventKind.FAST_COMMITTED:
                self._forget(event.batch_id)
        return events

    def tick(self, now: datetime, quiet_for: timedelta) -> list[BatchEvent]:
        """The kept messages of the losses read LATE ago or more whose batch's publish side has been quiet
        for LATE (or that were read WAIT_AT_MOST ago: with what came, or without); forgets batches not seen
        for `quiet_for` (a committed atomic batch says nothing more)."""
        kept = []
        for batch_id, (loss, read) in list(itertools.takewhile(lambda item: now - item[1][1] >= LATE,
                                                               self._late.items())):
            batch = self._open.get(batch_id)
            waits = now - read < WAIT_AT_MOST
            if batch is not None and (now - batch.touched >= LATE or not waits):
                kept.append(kept_event(loss, self._masked(loss.stream or batch.stream, batch)))
                self.kept += 1
                self._forget(batch_id)
            elif waits:
                continue
            del self._late[batch_id]
        while self._open and now - next(iter(self._open.values())).touched > quiet_for:
            self._held -= self._open.popitem(last=False)[1].held
        return kept

    def _forget(self, batch_id: str) -> None:
        if (batch := self._open.pop(batch_id, None)) is not None:
            self._held -= batch.held

    def _masked(self, stream: str | None, batch: _Open) -> list[KeptMessage]:
        seen = [("first", batch.first)] + ([("last", batch.last)] if batch.last is not None else [])
        return [self._one(place, stream, s) for place, s in seen]

    def _one(self, place: str, stream: str | None, seen: _Seen) -> KeptMessage:
        """Masked as the rules mask its stream's messages for a masked role (a payload held cut, with
        field rules, is masked whole); of a batch whose stream is not known, neither headers nor payload."""
        if stream is None:
            return KeptMessage(place, seen.seq, seen.subject, (), b"", seen.size, cut=seen.size > 0)
        headers, data = self.payloads.masked(stream, seen.headers, seen.data, seen.subject)
        cut = len(data) > KEPT_BYTES or (data == seen.data and seen.size > KEPT_BYTES)
        return KeptMessage(place, seen.seq, seen.subject, headers, data[:KEPT_BYTES], seen.size, cut)
