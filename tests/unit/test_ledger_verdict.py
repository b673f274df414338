"""A maintenance's verdict from the loss ledger: the losses of its window on the streams it touched
(named before the step or not), the others apart, a retracted loss not counted, and a window no
collector recorded said as such, never as nothing lost."""

from datetime import datetime, timedelta, timezone

from console.domain.events import BatchEvent, EventKind
from console.domain.ledger_verdict import judge

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc)
END = T0 + timedelta(seconds=60)


def lost(stream: str, batch: str, at: float = 10, kind=EventKind.ATOMIC_ABANDONED, reason="timeout") -> BatchEvent:
    return BatchEvent(f"{stream}-{batch}-{kind.value}", kind, T0 + timedelta(seconds=at), stream=stream,
                      batch_id=batch, reason=reason)


def test_the_losses_of_the_window_on_the_streams_touched_are_named_and_those_named_before_the_step_apart():
    events = [lost("A", "b1"), lost("A", "b1", at=11, kind=EventKind.ATOMIC_LOST, reason="leader change"),
              lost("A", "b2", kind=EventKind.FAST_ENDED_EARLY, reason="gap"), lost("B", "b3"),
              lost("A", "b4", at=-5), lost("A", "b5", at=90),  # outside the window
              lost("A", "b6"), BatchEvent("r", EventKind.LOSS_RETRACTED, T0 + timedelta(seconds=20), stream="A",
                                          batch_id="b6")]
    verdict = judge(events, {"A"}, T0, END, recorded=True, named=frozenset({("A", "b2")}))
    assert [(x.batch_id, x.kind, x.named) for x in verdict.lost] == [("b1", "atomic_abandoned", False),
                                                                     ("b2", "fast_ended_early", True)]
    assert verdict.elsewhere == 1 and [x.batch_id for x in verdict.unexpected] == ["b1"]
    text = verdict.text()
    assert "2 batch(es) lost on the streams touched" in text and "1 of them named before the step" in text
    assert "atomic_abandoned b1 on A (timeout)" in text and "1 lost on other streams meanwhile" in text
    assert judge(events, None, T0, END, recorded=True).elsewhere == 0  # a restart touches every stream


def test_a_clean_window_says_nothing_lost_and_an_unrecorded_one_cannot_tell():
    clean = judge([lost("B", "b3")], {"A"}, T0, END, recorded=True)
    assert clean.text().startswith("the ledger: no batch lost on the streams touched") and not clean.lost
    unrecorded = judge([], {"A"}, T0, END, recorded=False)
    assert unrecorded.text().startswith("the ledger cannot tell: no collector recorded")
    assert "no batch lost" not in unrecorded.text()
    interrupted = judge([BatchEvent("i", EventKind.CAPTURE_INTERRUPTED, T0 + timedelta(seconds=5))], {"A"}, T0, END,
                        recorded=True)
    assert "losses in it may be missing" in interrupted.text()
    assert unrecorded.to_dict()["recorded"] is False
