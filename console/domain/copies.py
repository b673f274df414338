"""An atomic batch followed into the copies of its stream (ADR-50: mirrors and sources ignore the batching
headers). A copy, a hub's stream sourcing a leaf's say, stores each message of a batch on its own and
without `Nats-Batch-Id` (verified on 2.15.1: only `Nats-Stream-Source: <origin>[:<hash>] <origin seq> ...`),
so a consumer of the copy can see part of a batch. This follows each committed batch of an origin, read
from the origin's messages (their batch headers and stream sequences), into each copy (the origin
sequence each copied message names, and its sequence in the copy), and judges it once every message has
arrived or the copy has gone past its last message (a copy takes its origin's messages in order: what is
missing then never comes): **whole** (every message, one unbroken run of the copy's sequences) or
**split** (some never arrived, a filtered source say, or other messages came between them), a
`copy_split` event for the ledger. A copy that lags (a leaf cut off) is waited for, up to `wait`; then
the batch is let go unjudged (counted), never called split. Pure: the collector feeds it the messages
read from both sides."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Mapping

from console.domain.atomic_tracker import BATCH_COMMIT, BATCH_ID
from console.domain.events import BatchEvent, EventKind

BATCH_SEQUENCE = "Nats-Batch-Sequence"
STREAM_SOURCE = "Nats-Stream-Source"
MAX_FOLLOWED = 10_000  # batches followed at once (a flood of batch ids forgets the oldest, counted)
MAX_WAITING = 100_000  # copied messages kept until their origin message is read
MAX_SIZE = 10_000  # messages of one batch followed (the server's own limit is 1,000)


@dataclass(frozen=True)
class Copy:
    stream: str  # the copy (a mirror, or a stream sourcing the origin)
    origin: str  # the stream it copies
    domain: str | None  # the origin's JetStream domain, when another's (a leaf's)


@dataclass
class FollowedBatch:
    origin: str
    batch_id: str
    seqs: dict[int, int] = field(default_factory=dict)  # origin sequence -> its batch sequence
    size: int | None = None  # known at its commit
    committed: datetime | None = None
    copied: dict[str, dict[int, int]] = field(default_factory=dict)  # copy -> origin sequence -> copy sequence
    first_copied: dict[str, datetime] = field(default_factory=dict)
    last_copied: dict[str, datetime] = field(default_factory=dict)


def source_of(header: str | None) -> tuple[str, int] | None:
    """(origin stream, origin sequence) from a copied message's Nats-Stream-Source; None for anything else."""
    parts = (header or "").split(" ")
    if len(parts) < 2 or not parts[0] or len(parts[0]) > 300 or not parts[1].isdigit() or len(parts[1]) > 20:
        return None
    return parts[0].split(":", 1)[0], int(parts[1])


class CopyFollower:
    def __init__(self, copies: list[Copy], wait: timedelta):
        self.copies = {c.stream: c for c in copies}
        self.wait = wait  # after its commit, how long a batch's copies are waited for
        self.batches: OrderedDict[tuple[str, str], FollowedBatch] = OrderedDict()  # (origin, batch id)
        self.by_seq: dict[tuple[str, int], tuple[str, str]] = {}  # (origin, origin seq) -> its batch
        self.waiting: OrderedDict[tuple[str, int], list[tuple[str, int, datetime]]] = OrderedDict()
        self.reached: dict[tuple[str, str], int] = {}  # (copy, origin) -> the highest origin sequence it holds
        self.whole = 0  # batches copied whole, every copy
        self.split = 0
        self.unjudged = 0  # batches whose copies lagged past the wait
        self.forgotten = 0  # batches or copied messages let go past the bounds
        self.malformed = 0

    def origin_message(self, origin: str, seq: int, headers: Mapping[str, str] | None, at: datetime) -> None:
        """A message of an origin stream: a batch's (Nats-Batch-Id) joins it; another lets its copies go."""
        headers = headers or {}
        arrived = self.waiting.pop((origin, seq), [])
        batch_id = headers.get(BATCH_ID)
        if not batch_id:
            return
        try:
            in_batch = int(headers.get(BATCH_SEQUENCE, ""))
        except ValueError:
            self.malformed += 1
            return
        key = (origin, batch_id[:64])
        batch = self.batches.get(key)
        if batch is None:
            batch = self.batches[key] = FollowedBatch(origin, key[1])
            while len(self.batches) > MAX_FOLLOWED:
                self._drop(next(iter(self.batches)))
                self.forgotten += 1
        if len(batch.seqs) >= MAX_SIZE:
            self.malformed += 1
            return
        batch.seqs[seq] = in_batch
        self.by_seq[(origin, seq)] = key
        if BATCH_COMMIT in headers:
            batch.size, batch.committed = in_batch - (1 if headers[BATCH_COMMIT] == "eob" else 0), at
        for copy, copy_seq, when in arrived:
            self._copied(batch, copy, seq, copy_seq, when)

    def copy_message(self, copy: str, copy_seq: int, source: str | None, at: datetime) -> None:
        """A message of a copy, with its Nats-Stream-Source."""
        found = source_of(source)
        if found is None or copy not in self.copies:
            self.malformed += found is None
            return
        origin, origin_seq = found
        if origin != self.copies[copy].origin:  # another source of the same copy: not followed
            return
        if (copy, origin) in self.reached or len(self.reached) < MAX_FOLLOWED:
            self.reached[(copy, origin)] = max(origin_seq, self.reached.get((copy, origin), 0))
        key = self.by_seq.get((origin, origin_seq))
        if key is None or key not in self.batches:  # its origin message not read yet, or no batch's
            self.waiting.setdefault((origin, origin_seq), []).append((copy, copy_seq, at))
            while len(self.waiting) > MAX_WAITING:
                self.waiting.popitem(last=False)
                self.forgotten += 1
            return
        self._copied(self.batches[key], copy, origin_seq, copy_seq, at)

    def _copied(self, batch: FollowedBatch, copy: str, origin_seq: int, copy_seq: int, at: datetime) -> None:
        batch.copied.setdefault(copy, {})[origin_seq] = copy_seq
        batch.first_copied.setdefault(copy, at)
        batch.last_copied[copy] = at

    def tick(self, now: datetime) -> list[BatchEvent]:
        """The committed batches each copy has all of, or has gone past: judged and let go; those a copy still
        lags behind past the wait, let go unjudged."""
        events: list[BatchEvent] = []
        for key, batch in list(self.batches.items()):
            if batch.committed is None or batch.size is None or not batch.seqs:
                continue
            copies = [c for c in self.copies.values() if c.origin == batch.origin]
            last = max(batch.seqs)
            if not all(len(batch.copied.get(c.stream, {})) >= batch.size or self.reached.get((c.stream, c.origin), 0) >= last
                       for c in copies):
                if now - batch.committed >= self.wait:
                    self._drop(key)
                    self.unjudged += 1
                continue
            said = [self._split(batch, c, now) for c in copies]
            found = [e for e in said if e is not None]
            events += found
            self.split += bool(found)
            self.whole += not found
            self._drop(key)
        return events

    def _split(self, batch: FollowedBatch, copy: Copy, now: datetime) -> BatchEvent | None:
        copied = batch.copied.get(copy.stream, {})
        size = batch.size or 0
        seqs = sorted(copied.values())
        between = (seqs[-1] - seqs[0] + 1 - len(seqs)) if seqs else 0
        if len(copied) >= size and between == 0:
            return None
        spread = (batch.last_copied[copy.stream] - batch.first_copied[copy.stream]).total_seconds() if seqs else 0.0
        where = f" (JetStream domain {copy.domain})" if copy.domain else ""
        said = (f"{len(copied)} of its {size} message(s) in {copy.stream}"
                + (f" at sequences {seqs[0]}-{seqs[-1]}" if seqs else "")
                + (f", {between} other message(s) between them" if between else "")
                + (f", over {spread:.2f} s" if len(seqs) > 1 else "")
                + f": a reader of {copy.stream} can see part of the batch, committed whole on {batch.origin}{where}")
        return BatchEvent(f"copy.{copy.stream}.{batch.origin}.{batch.batch_id}", EventKind.COPY_SPLIT, now, copy.stream,
                          batch.batch_id, reason="partial" if len(copied) < size else "interleaved", count=len(copied),
                          lost=max(0, size - len(copied)), domain=copy.domain, detail=said[:1000])

    def _drop(self, key: tuple[str, str]) -> None:
        batch = self.batches.pop(key)
        for seq in batch.seqs:
            self.by_seq.pop((batch.origin, seq), None)
