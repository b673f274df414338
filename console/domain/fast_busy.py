"""Fast-batch messages a full server queue refused (429 10167 "too many requests"), per batch.

Observed on nats-server 2.15.1, with a publisher that does not wait for its flow acks and a stream whose
queue holds `max_buffered_msgs`: each message that finds the queue full is refused at once, on its own
reply subject (the subject says its batch sequence; the body does not), while the stream works through
what it holds. When the next message is stored, a gap ack names the refused run exactly (ok mode; fail
mode ends the batch there). Replies race: a refusal can arrive before the acks of messages sent before it.

So the refusals are kept as sequences; a gap ack names those before it; a PubAck ends the batch with
nothing left unnamed; a refused commit leaves a tail no gap ack will name: what is refused past the last
gap, said once the replies that raced it have come in (`due`)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

TOO_MANY_REQUESTS = 10167
MAX_KEPT_SEQS = 100_000  # refused sequences kept a batch past its last gap; more are counted
MAX_KEPT_IN_ALL = 1_000_000  # and in all (any client can forge refusals on a batch's reply subjects)
MAX_TAIL_RUNS = 10  # runs of a refused tail said as events; what is after them, counted in the last


@dataclass
class Refused:
    batch_id: str
    stream: str | None
    gap_mode: str
    first: int  # the batch's first refused sequence
    last_seen: datetime
    seqs: set[int] = field(default_factory=set)  # refused past the last gap ack
    past_gap: int = 0  # the last gap ack's sequence: what was refused before it, it names
    uncounted: int = 0  # refusals past MAX_KEPT_SEQS
    commit_refused_at: datetime | None = None

    def tail(self) -> list[tuple[int, int]]:
        """What no gap ack names, as runs (first, last), at most MAX_TAIL_RUNS (the last one to the end)."""
        runs: list[tuple[int, int]] = []
        for seq in sorted(s for s in self.seqs if s > self.past_gap):
            if runs and seq == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], seq)
            else:
                runs.append((seq, seq))
        if len(runs) > MAX_TAIL_RUNS:
            runs = runs[:MAX_TAIL_RUNS - 1] + [(runs[MAX_TAIL_RUNS - 1][0], runs[-1][1])]
        return runs


class RefusedRuns:
    def __init__(self, max_batches: int):
        self.max_batches = max_batches
        self.batches: OrderedDict[str, Refused] = OrderedDict()
        self.kept = 0  # refused sequences kept in all

    def refused(self, batch_id: str, stream: str | None, gap_mode: str, seq: int, commit: bool,
                now: datetime) -> Refused | None:
        """One refusal: the batch's record when it is its first (to be said), else None."""
        record = self.batches.get(batch_id)
        first = record is None
        if record is None:
            record = self.batches[batch_id] = Refused(batch_id, stream, gap_mode, seq, now)
            if len(self.batches) > self.max_batches:
                self._drop(next(iter(self.batches)))
        record.last_seen = now
        record.stream = record.stream or stream
        if seq in record.seqs:
            pass  # a replay
        elif len(record.seqs) < MAX_KEPT_SEQS and self.kept < MAX_KEPT_IN_ALL:
            record.seqs.add(seq)
            self.kept += 1
        else:
            record.uncounted += 1
        if commit:
            record.commit_refused_at = now
        return record if first else None

    def gap(self, batch_id: str, seq: int) -> None:
        """A gap ack up to `seq`: the refusals before it are named there."""
        if (record := self.batches.get(batch_id)) is not None and seq > record.past_gap:
            record.past_gap = seq
            named = {s for s in record.seqs if s <= seq}
            record.seqs -= named
            self.kept -= len(named)

    def ended(self, batch_id: str) -> None:
        """Its commit was answered, or its outcome is said another way: nothing left to name."""
        self._drop(batch_id)

    def due(self, now: datetime, wait: timedelta, give_up: timedelta) -> list[Refused]:
        """The batches whose commit was refused `wait` ago (their racing replies in): popped. Records of
        batches quiet past `give_up` are dropped unsaid (their batch's silence is judged by the tracker)."""
        out = []
        for batch_id, record in list(self.batches.items()):
            if record.commit_refused_at is not None and now - record.commit_refused_at >= wait:
                out.append(record)
                self._drop(batch_id)
            elif now - record.last_seen >= give_up:
                self._drop(batch_id)
        return out

    def _drop(self, batch_id: str) -> None:
        if (record := self.batches.pop(batch_id, None)) is not None:
            self.kept -= len(record.seqs)
