"""Each tapped batch's first and last message as the publish side saw them, held until the batch ends;
a lost batch's two are masked by the rules and go into the event log beside its loss, in one
BATCH_MESSAGES event (console.domain.kept_messages). A batch that ends well is forgotten."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from console.decoders.rules import Decoders, pick
from console.domain.events import LOST_KINDS, BatchEvent, EventKind
from console.domain.kept_messages import KEPT_BYTES, KeptMessage, kept_event
from console.domain.masking import Masking

HELD_BYTES = 16 * 1024 * 1024  # payloads held at most, across batches: the oldest batches go first
HELD_PAYLOAD = 64 * 1024  # of one payload: masking a field needs the message whole; past this it masks it all


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
    def __init__(self, masking: Masking = Masking(), decoders: Decoders | None = None):
        self.masking, self._decoders = masking, pick(decoders)
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._held = 0
        self.kept = 0  # BATCH_MESSAGES events made

    def saw(self, batch_id: str, seq: int, stream: str | None, subject: str, headers: tuple[tuple[str, str], ...],
            data: bytes, now: datetime) -> None:
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

    def with_messages(self, events: list[BatchEvent]) -> list[BatchEvent]:
        """`events` and, after each loss of a batch whose messages were seen, the event that keeps them."""
        if not self._open:
            return events
        out = []
        for event in events:
            out.append(event)
            if not event.batch_id or (batch := self._open.get(event.batch_id)) is None:
                continue
            if event.kind is EventKind.FAST_GAP:
                batch.gapped = True
            elif event.kind in LOST_KINDS or (event.kind is EventKind.FAST_COMMITTED and batch.gapped):
                out.append(kept_event(event, self._masked(event.stream or batch.stream, batch)))
                self.kept += 1
                self._forget(event.batch_id)
            elif event.kind is EventKind.FAST_COMMITTED:
                self._forget(event.batch_id)
        return out

    def tick(self, now: datetime, quiet_for: timedelta) -> None:
        """Forgets batches not seen for `quiet_for`: a committed atomic batch says nothing more."""
        while self._open and now - next(iter(self._open.values())).touched > quiet_for:
            self._held -= self._open.popitem(last=False)[1].held

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
        headers, data = self.masking.apply(stream, seen.headers, seen.data, subject=seen.subject,
                                           decoders=self._decoders)
        cut = len(data) > KEPT_BYTES or (data == seen.data and seen.size > KEPT_BYTES)
        return KeptMessage(place, seen.seq, seen.subject, headers, data[:KEPT_BYTES], seen.size, cut)
