"""The ends of a stream's atomic batches, and a consumer's position counted in them."""

from __future__ import annotations

from console.domain import batch_ledger
from console.domain.batch_ledger import BatchCount, BatchLedger

END = {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"}
INSIDE = {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "2"}


def three_batches_of_three() -> BatchLedger:
    ledger = BatchLedger()
    for seq in range(1, 10):
        ledger.seen(seq, END if seq % 3 == 0 else INSIDE, 9 - seq)
    return ledger


def test_a_position_counts_the_batches_it_read_whole_and_those_ahead():
    ledger = three_batches_of_three()
    assert ledger.count(0) == BatchCount(0, 3, True)
    assert ledger.count(5) == BatchCount(1, 2, True)  # inside the second batch: one read whole
    assert ledger.count(6) == BatchCount(2, 1, True)
    assert ledger.count(9) == BatchCount(3, 0, True)


def test_a_message_seen_twice_or_out_of_order_is_counted_once():
    ledger = three_batches_of_three()
    ledger.seen(9, END, 0)
    ledger.seen(3, END, 6)
    assert list(ledger.ends) == [3, 6, 9]


def test_an_end_written_by_another_value_a_non_batch_message_and_no_headers_are_no_end():
    ledger = BatchLedger()
    ledger.seen(1, {"Nats-Batch-Commit": "eob"}, 2)  # the marker is never stored: the server writes 1
    ledger.seen(2, {"Nats-Batch-Commit": "1 "}, 1)
    ledger.seen(3, {"Nats-Batch-Commit": "1"}, 1)  # no batch id: not an atomic batch's (the server sets both)
    ledger.seen(4, None, 0)
    assert list(ledger.ends) == [] and ledger.count(4) == BatchCount(0, 0, True)


def test_while_the_stream_is_still_read_a_position_past_it_is_not_counted_and_ahead_is_at_least():
    ledger = BatchLedger()
    for seq in range(1, 7):
        ledger.seen(seq, END if seq % 3 == 0 else INSIDE, 100 - seq)
    assert ledger.count(8) is None
    assert ledger.count(4) == BatchCount(1, 1, False)


def test_a_stream_whose_first_messages_were_gone_does_not_count_a_position_before_them():
    ledger = BatchLedger()
    for seq in range(50, 53):
        ledger.seen(seq, END if seq == 52 else INSIDE, 52 - seq)
    assert ledger.count(10) is None and ledger.count(49) == BatchCount(0, 1, True)
    assert BatchLedger().count(0) is None  # nothing read yet


def test_past_its_bound_the_oldest_ends_are_forgotten_and_a_position_below_them_is_not_counted(monkeypatch):
    monkeypatch.setattr(batch_ledger, "MAX_ENDS", 10)
    ledger = BatchLedger()
    for seq in range(1, 12):
        ledger.seen(seq, END, 11 - seq)
    assert len(ledger.ends) <= 10 and ledger.ends[-1] == 11
    assert ledger.count(2) is None
    assert ledger.count(11) == BatchCount(11, 0, True)  # the forgotten ones read whole too
