"""Where each atomic batch of a stream ends, so a consumer's position says how many batches it has read
whole and how many wait. An atomic batch is stored at once, its messages side by side, the last carrying
`Nats-Batch-Commit: 1` (the server writes it there for an `eob` commit too): the ends are those
messages' sequences, read from the stream's headers (console.broker.consumers follows them). Memory is
bounded: past MAX_ENDS the oldest ends are forgotten, and a position below them is not counted."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Mapping

BATCH_ID, BATCH_COMMIT = "Nats-Batch-Id", "Nats-Batch-Commit"
MAX_ENDS = 1_000_000  # batch ends kept per stream (8 bytes each)


@dataclass(frozen=True)
class BatchCount:
    """A consumer's position in a stream's batches."""

    read_whole: int  # batches whose every message it acknowledged (its ack floor at or past their last)
    ahead: int  # batches ended past its position: not yet read whole
    complete: bool  # False: the stream's headers are still being read, `ahead` is at least this


@dataclass
class BatchLedger:
    """The ends of a stream's atomic batches, from its first message read to `through`."""

    ends: array[int] = field(default_factory=lambda: array("q"))
    through: int = 0  # the last stream sequence read
    since: int = 0  # the first stream sequence counted from (ends below it forgotten or never read)
    drained: bool = False  # the last message read was the stream's last then
    forgotten: int = 0  # ends let go past MAX_ENDS (each below `since`)

    def seen(self, seq: int, headers: Mapping[str, str] | None, pending: int) -> None:
        """One stored message (in stream order; a sequence seen before is skipped), and how many were
        stored after it when it was sent."""
        if seq <= self.through:
            return
        if not self.since:
            self.since = seq
        self.through, self.drained = seq, pending == 0
        if headers and headers.get(BATCH_COMMIT) == "1" and headers.get(BATCH_ID):  # an atomic batch's last
            self.ends.append(seq)
            if len(self.ends) > MAX_ENDS:
                forget = len(self.ends) - MAX_ENDS // 2
                self.since = self.ends[forget - 1] + 1
                self.forgotten += forget
                del self.ends[:forget]

    def count(self, floor_seq: int) -> BatchCount | None:
        """A position's batches read whole and ahead; None when the ledger does not cover it (not read up
        to it yet, or it is below the ends kept)."""
        if self.through < floor_seq and not self.drained or floor_seq + 1 < self.since or not self.since:
            return None
        read = bisect_right(self.ends, floor_seq)
        return BatchCount(self.forgotten + read, len(self.ends) - read, self.drained)
