from datetime import datetime, timedelta, timezone

import pytest

from console.domain.atomic_tracker import (
    ANSWER_WAIT, INCOMPLETE, KEPT_PAST_TIMEOUT, LEADER_CHANGE, AtomicTracker, MalformedAtomicMessage, batch_message,
    reply_prefix,
)
from console.domain.events import EventKind

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def headers(batch: str, seq: int | str, commit: bool = False) -> dict[str, str]:
    found = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(seq)}
    return {**found, "Nats-Batch-Commit": "1"} if commit else found


def test_open_batches_are_named_lost_by_the_event_that_drops_them_and_forgotten_otherwise():
    tracker = AtomicTracker(batch_timeout=10)
    tracker.observe("S", headers("a", 1), at(0))
    tracker.observe("S", headers("a", 2), at(1))
    tracker.observe("S", headers("done", 1), at(1))
    tracker.observe("S", headers("done", 2, commit=True), at(1))  # committed: not open
    tracker.observe("T", headers("other", 1), at(1))
    tracker.observe("S", {"Nats-Msg-Id": "x"}, at(1))  # not a batch message
    [lost] = tracker.dropped("S", "disabled", at(2))
    assert (lost.kind, lost.batch_id, lost.reason, lost.seq, lost.inferred) == (EventKind.ATOMIC_LOST, "a", "disabled", 2, True)
    assert tracker.dropped("S", "stream_deleted", at(3)) == [] and tracker.open_on("T") == 1
    assert tracker.tick(at(12)) == []  # silent past the timeout: the server abandons it, with an advisory; kept a while
    assert tracker.open_on("T") == 1  # for an election's advisory that comes late
    tracker.tick(at(11 + KEPT_PAST_TIMEOUT + 1))
    assert tracker.open_on("T") == 0


def election(batches: dict[str, int], commits: tuple[str, ...] = ()) -> AtomicTracker:
    """S elects a leader at 5 s with these batches open (id -> messages sent, from 0 s); `commits` then commit at 6 s."""
    tracker = AtomicTracker(batch_timeout=10)
    for batch, sent in batches.items():
        for seq in range(1, sent + 1):
            tracker.observe("S", headers(batch, seq), at(seq * 0.1))
    assert tracker.dropped("S", LEADER_CHANGE, at(5.2), at=at(5)) == []  # suspects, not yet lost
    for batch in commits:
        tracker.observe("S", headers(batch, batches[batch] + 1, commit=True), at(6))
    return tracker


def test_a_batch_open_at_an_election_is_lost_only_when_its_commit_is_refused():
    tracker = election({"kept": 2, "refused": 3, "gone": 1}, commits=("kept", "refused"))
    assert tracker.answered("kept", None, at(6.1)) == []  # a PubAck: it met the new leader, whatever the tap's order
    [lost] = tracker.answered("refused", INCOMPLETE, at(6.1))
    assert (lost.kind, lost.batch_id, lost.reason, lost.seq, lost.inferred) == \
        (EventKind.ATOMIC_LOST, "refused", LEADER_CHANGE, 3, False)
    assert "refused (10176)" in lost.detail
    assert tracker.tick(at(6.2)) == [] and tracker.tick(at(5 + 10 + ANSWER_WAIT - 0.1)) == []
    [gone] = tracker.tick(at(5 + 10 + ANSWER_WAIT + 0.1))  # never committed: lost, inferred
    assert (gone.batch_id, gone.reason, gone.inferred) == ("gone", LEADER_CHANGE, True)
    assert tracker.tick(at(60)) == [] and tracker.open_on("S") == 0


def test_a_suspect_whose_commit_is_not_answered_is_lost_inferred():
    """Its publisher's replies not followed (or gone): as the tap alone can tell it."""
    tracker = election({"unheard": 2}, commits=("unheard",))
    assert tracker.tick(at(6 + ANSWER_WAIT - 0.1)) == []
    [lost] = tracker.tick(at(6 + ANSWER_WAIT + 0.1))
    assert (lost.batch_id, lost.inferred) == ("unheard", True) and "reply was not seen" in lost.detail
    [retracted] = tracker.answered("unheard", None, at(9))  # its PubAck, read late by a loaded collector
    assert (retracted.kind, retracted.batch_id, retracted.stream) == (EventKind.LOSS_RETRACTED, "unheard", "S")
    assert tracker.answered("unheard", None, at(10)) == []  # once


def test_a_batch_the_tap_saw_begin_after_the_election_is_still_its_loss_when_refused_10176():
    """The tap read the batch's first message after the election's advisory; the server had it before."""
    tracker = election({})
    tracker.observe("S", headers("late", 1), at(6))
    tracker.observe("S", headers("late", 2, commit=True), at(6.2))
    [lost] = tracker.answered("late", INCOMPLETE, at(6.3))
    assert (lost.batch_id, lost.reason, lost.inferred) == ("late", LEADER_CHANGE, False)
    tracker.observe("S", headers("fine", 1), at(6))
    tracker.observe("S", headers("fine", 2, commit=True), at(6.2))
    assert tracker.answered("fine", None, at(6.3)) == [] and tracker.tick(at(60)) == []


def test_a_refusal_heard_before_the_elections_advisory_is_that_elections_loss():
    """The commit's reply reaches the collector before the advisory of the election that dropped the batch."""
    tracker = election({})
    for batch in ("first", "named"):
        tracker.observe("S", headers(batch, 1), at(30))
        tracker.observe("S", headers(batch, 2, commit=True), at(31))
        assert tracker.answered(batch, INCOMPLETE, at(31.1)) == []  # held: no cause known yet
    tracker.abandoned("named")  # an advisory said why: the advisory's
    [lost] = tracker.dropped("S", LEADER_CHANGE, at(31.3), at=at(30.9))
    assert (lost.batch_id, lost.reason, lost.inferred) == ("first", LEADER_CHANGE, False)
    assert tracker.tick(at(60)) == []


def test_a_refusal_nothing_explains_is_lost_for_what_the_server_said():
    tracker = AtomicTracker(batch_timeout=10)
    for batch, refused in (("incomplete", INCOMPLETE), ("no_responders", 0), ("error", 10199)):
        tracker.observe("S", headers(batch, 1), at(0))
        tracker.observe("S", headers(batch, 2, commit=True), at(0.1))
        assert tracker.answered(batch, refused, at(0.2)) == []
    assert tracker.tick(at(0.2 + 10 + ANSWER_WAIT - 0.1)) == []
    lost = tracker.tick(at(0.2 + 10 + ANSWER_WAIT + 0.1))
    assert [(e.batch_id, e.reason, e.inferred) for e in lost] == \
        [("incomplete", "incomplete", False), ("no_responders", "no_responders", False), ("error", "error", False)]
    assert "neither an advisory nor an election said why" in lost[0].detail and "(10176)" in lost[0].detail


def test_an_advisory_that_names_a_suspect_leaves_it_to_the_advisory():
    tracker = election({"named": 2}, commits=("named",))
    tracker.abandoned("named")
    assert tracker.answered("named", INCOMPLETE, at(6.1)) == [] and tracker.tick(at(60)) == []


def test_a_late_election_advisory_names_the_batches_open_when_it_happened_and_only_those():
    """A busy system's election advisory can come after the batch timeout (the test cluster's is 1 s): the
    batches open at the election's own time are lost; one quiet for a timeout by then was abandoned."""
    tracker = AtomicTracker(batch_timeout=1)
    tracker.observe("S", headers("open", 1), at(10))
    tracker.observe("S", headers("quiet", 1), at(7))
    tracker.tick(at(13))  # the advisory is not here yet, 3 s later
    assert tracker.dropped("S", "leader_change", at(13), at=at(10.5)) == []
    lost = tracker.tick(at(13.6))  # its commit never came
    assert [b.batch_id for b in lost] == ["open"] and tracker.open_on("S") == 0


def test_the_batches_waiting_for_their_commits_reply_are_bounded():
    tracker = AtomicTracker(batch_timeout=10, max_batches=3)
    for i in range(10):
        tracker.observe("S", headers(f"b{i}", 1), at(0))
        tracker.observe("S", headers(f"b{i}", 2, commit=True), at(0))
    assert list(tracker.committing) == ["b7", "b8", "b9"]


@pytest.mark.parametrize("bad", [headers("", 1), headers("x" * 65, 1), headers("a", 0), headers("a", "1e3"),
                                 headers("a", "9" * 20), headers("a\x00", 1), {"Nats-Batch-Id": "a"}])
def test_headers_the_server_would_refuse_are_malformed(bad):
    with pytest.raises(MalformedAtomicMessage):
        batch_message(bad)


def test_a_reply_prefix_is_followed_only_for_a_plain_reply_subject():
    assert reply_prefix("_INBOX.abc123.7") == "_INBOX.abc123.*"
    for hostile in ("_INBOX.>", "_INBOX.*.1", "a.b", "_INBOX..1", "_INBOX.a b.1", "_INBOX." + "x" * 300 + ".1"):
        assert reply_prefix(hostile) is None
