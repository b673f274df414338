"""What a maintenance cost, read from the loss ledger afterwards: the batches lost in its window on the
streams it touched (by kind and reason, those named before a step apart), the losses elsewhere, and
whether the ledger can tell at all. A window no collector recorded is "cannot tell", never "nothing
lost": a maintenance is only proved by a ledger that was being written. Pure: the broker reads the
event log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from console.domain.events import LOST_KINDS, BatchEvent, EventKind


@dataclass(frozen=True)
class LostInWindow:
    stream: str
    batch_id: str
    kind: str
    reason: str
    named: bool  # named before the step it followed (a batch still open when the time box ended)


@dataclass(frozen=True)
class LedgerVerdict:
    start: datetime
    end: datetime  # the window's end: the maintenance's, and the batch timeout after it
    recorded: bool  # a collector wrote its status before and after the window: the ledger covers it
    interrupted: bool  # a capture interruption overlaps the window: losses in it may be missing
    lost: tuple[LostInWindow, ...]  # on the streams the maintenance touched
    elsewhere: int  # batches lost on other streams in the window

    @property
    def unexpected(self) -> tuple[LostInWindow, ...]:
        return tuple(loss for loss in self.lost if not loss.named)

    def text(self) -> str:
        span = f"{self.start.isoformat(timespec='seconds')} to {self.end.isoformat(timespec='seconds')}"
        if not self.recorded:
            return (f"the ledger cannot tell: no collector recorded {span} (start `collect` or `up` beside the "
                    f"cluster to prove a maintenance)")
        if self.lost:
            named = len(self.lost) - len(self.unexpected)
            shown = ", ".join(f"{loss.kind} {loss.batch_id} on {loss.stream}" + (f" ({loss.reason})" if loss.reason
                                                                                    else "")
                              for loss in self.lost[:10])
            said = f"the ledger: {len(self.lost)} batch(es) lost on the streams touched, {span}" + \
                (f", {named} of them named before the step" if named else "") + f": {shown}"
        else:
            said = f"the ledger: no batch lost on the streams touched, {span}"
        if self.elsewhere:
            said += f"; {self.elsewhere} lost on other streams meanwhile"
        if self.interrupted:
            said += "; capture was interrupted in the window: losses in it may be missing"
        return said

    def to_dict(self) -> dict[str, object]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "recorded": self.recorded,
                "interrupted": self.interrupted, "elsewhere": self.elsewhere,
                "lost": [{"stream": loss.stream, "batch_id": loss.batch_id, "kind": loss.kind, "reason": loss.reason,
                          "named_before_the_step": loss.named} for loss in self.lost]}


def judge(events: list[BatchEvent], streams: set[str] | None, start: datetime, end: datetime, recorded: bool,
          named: frozenset[tuple[str, str]] = frozenset()) -> LedgerVerdict:
    """The verdict over the events of the window [start, end]. streams: those the maintenance touched
    (None: every stream, as a restart of a whole node touches them all); named: (stream, batch id) of
    the batches named before a step. A loss later retracted (a reply came after all) is not counted."""
    inside = [e for e in events if start <= e.time <= end]
    retracted = {(e.stream, e.batch_id) for e in inside if e.kind is EventKind.LOSS_RETRACTED}
    losses: dict[tuple[str, str], BatchEvent] = {}
    for e in inside:
        if e.kind in LOST_KINDS and e.stream and e.batch_id and (e.stream, e.batch_id) not in retracted:
            losses.setdefault((e.stream, e.batch_id), e)  # one batch, however many of its records
    touched = [e for key, e in losses.items() if streams is None or key[0] in streams]
    return LedgerVerdict(
        start, end, recorded, any(e.kind is EventKind.CAPTURE_INTERRUPTED for e in inside),
        tuple(LostInWindow(e.stream or "", e.batch_id or "", e.kind.value, e.reason or "",
                           (e.stream, e.batch_id) in named) for e in touched),
        len(losses) - len(touched))
