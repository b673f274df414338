from datetime import datetime, timedelta, timezone

import pytest

from console.domain.atomic_tracker import KEPT_PAST_TIMEOUT, AtomicTracker, MalformedAtomicMessage, batch_message, reply_prefix
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
    [lost] = tracker.dropped("S", "leader_change", at(2))
    assert (lost.kind, lost.batch_id, lost.reason, lost.seq) == (EventKind.ATOMIC_LOST, "a", "leader_change", 2)
    assert tracker.dropped("S", "leader_change", at(3)) == [] and tracker.open_on("T") == 1
    tracker.tick(at(12))  # silent past the timeout: the server abandons it, with an advisory; kept a while
    assert tracker.open_on("T") == 1  # for an election's advisory that comes late
    tracker.tick(at(11 + KEPT_PAST_TIMEOUT + 1))
    assert tracker.open_on("T") == 0


def test_a_late_election_advisory_names_the_batches_open_when_it_happened_and_only_those():
    """A busy system's election advisory can come after the batch timeout (the test cluster's is 1 s): the
    batches open at the election's own time are lost; one quiet for a timeout by then was abandoned."""
    tracker = AtomicTracker(batch_timeout=1)
    tracker.observe("S", headers("open", 1), at(10))
    tracker.observe("S", headers("quiet", 1), at(7))
    tracker.tick(at(13))  # the advisory is not here yet, 3 s later
    lost = tracker.dropped("S", "leader_change", at(13), at=at(10.5))
    assert [b.batch_id for b in lost] == ["open"] and tracker.open_on("S") == 0


@pytest.mark.parametrize("bad", [headers("", 1), headers("x" * 65, 1), headers("a", 0), headers("a", "1e3"),
                                 headers("a", "9" * 20), headers("a\x00", 1), {"Nats-Batch-Id": "a"}])
def test_headers_the_server_would_refuse_are_malformed(bad):
    with pytest.raises(MalformedAtomicMessage):
        batch_message(bad)


def test_a_reply_prefix_is_followed_only_for_a_plain_reply_subject():
    assert reply_prefix("_INBOX.abc123.7") == "_INBOX.abc123.*"
    for hostile in ("_INBOX.>", "_INBOX.*.1", "a.b", "_INBOX..1", "_INBOX.a b.1", "_INBOX." + "x" * 300 + ".1"):
        assert reply_prefix(hostile) is None
