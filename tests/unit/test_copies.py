"""An atomic batch followed into its stream's copies (console.domain.copies): whole, or split (partial or
interleaved), judged once the copy holds it all or has gone past it; a lagging copy is never called split;
hostile source headers and floods of ids are counted and bounded."""

from datetime import datetime, timedelta, timezone

import pytest

from console.domain.copies import MAX_FOLLOWED, MAX_WAITING, Copy, CopyFollower, source_of
from console.domain.events import EventKind

T0 = datetime(2026, 12, 2, tzinfo=timezone.utc)
EDGE = Copy("HUB_EDGE", "EDGE", "leaf1")


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def batch(follower: CopyFollower, batch_id: str, first_seq: int, size: int, when: float = 0) -> None:
    for i in range(size):
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i + 1)}
        if i == size - 1:
            headers["Nats-Batch-Commit"] = "1"
        follower.origin_message("EDGE", first_seq + i, headers, at(when))


def copied(follower: CopyFollower, origin_seq: int, copy_seq: int, copy: str = "HUB_EDGE", when: float = 0.1) -> None:
    follower.copy_message(copy, copy_seq, f"EDGE:KULbcpqa {origin_seq} > > rXHGUdtQ", at(when))


def test_a_batch_copied_whole_says_nothing_and_one_copied_in_part_or_interleaved_is_split():
    follower = CopyFollower([EDGE], timedelta(hours=1))
    batch(follower, "whole", 1, 3)
    for seq in (1, 2, 3):
        copied(follower, seq, 10 + seq)
    batch(follower, "partial", 4, 3)
    copied(follower, 4, 14)
    copied(follower, 6, 15)  # 5 filtered out: the copy is past the batch's last message
    batch(follower, "mixed", 7, 2)
    copied(follower, 7, 16)
    follower.copy_message("HUB_EDGE", 17, "OTHER 1 > >", at(0.2))  # another source's message between
    copied(follower, 8, 18)
    events = follower.tick(at(1))
    assert [(e.kind, e.batch_id, e.reason, e.count, e.lost, e.domain) for e in events] == [
        (EventKind.COPY_SPLIT, "partial", "partial", 2, 1, "leaf1"),
        (EventKind.COPY_SPLIT, "mixed", "interleaved", 2, 0, "leaf1")]
    assert "1 other message(s) between them" in events[1].detail and (follower.whole, follower.split) == (1, 2)
    assert follower.batches == {} and follower.by_seq == {}


def test_a_copy_read_before_its_origin_and_a_lagging_copy_are_never_called_split():
    follower = CopyFollower([EDGE], timedelta(minutes=5))
    copied(follower, 1, 1)  # the copy's reader ahead of the origin's
    batch(follower, "early", 1, 2)
    assert follower.tick(at(1)) == []  # 1 of 2 copied, the copy not past it: waited for
    copied(follower, 2, 2)
    assert follower.tick(at(2)) == [] and follower.whole == 1
    batch(follower, "lagging", 3, 2)  # the leaf cut off: nothing copied for five minutes
    assert follower.tick(at(299)) == []
    assert follower.tick(at(301)) == [] and follower.unjudged == 1 and follower.split == 0


def test_an_open_batch_is_not_judged_and_an_eob_commit_counts_its_stored_messages():
    follower = CopyFollower([EDGE], timedelta(hours=1))
    follower.origin_message("EDGE", 1, {"Nats-Batch-Id": "open", "Nats-Batch-Sequence": "1"}, at(0))
    assert follower.tick(at(10)) == [] and len(follower.batches) == 1
    follower.origin_message("EDGE", 2, {"Nats-Batch-Id": "e", "Nats-Batch-Sequence": "1"}, at(0))
    follower.origin_message("EDGE", 3, {"Nats-Batch-Id": "e", "Nats-Batch-Sequence": "2", "Nats-Batch-Commit": "eob"},
                            at(0))
    copied(follower, 2, 1)
    assert follower.tick(at(1)) == [] and follower.whole == 1


@pytest.mark.parametrize("header", [None, "", "EDGE", "EDGE x", "EDGE -1", "EDGE 1" + "0" * 30, "x" * 400 + " 1",
                                    " 1 2"])
def test_a_hostile_source_header_is_counted(header):
    follower = CopyFollower([EDGE], timedelta(hours=1))
    assert source_of(header) is None
    follower.copy_message("HUB_EDGE", 1, header, at(0))
    assert follower.malformed == 1 and follower.waiting == {}


def test_floods_of_batch_ids_and_copied_messages_are_bounded():
    follower = CopyFollower([EDGE], timedelta(hours=1))
    for i in range(MAX_FOLLOWED + 10):
        follower.origin_message("EDGE", i + 1, {"Nats-Batch-Id": f"b{i}", "Nats-Batch-Sequence": "1"}, at(0))
    assert len(follower.batches) == MAX_FOLLOWED and follower.forgotten == 10
    for i in range(MAX_WAITING + 5):
        copied(follower, 10**9 + i, i)
    assert len(follower.waiting) == MAX_WAITING
    follower.origin_message("EDGE", 5, {"Nats-Batch-Id": "x" * 5000, "Nats-Batch-Sequence": "nope"}, at(0))
    assert follower.malformed == 1
