"""A lost batch's kept messages: what the collector holds and writes (bounded, masked, none for a batch
that ends well, no payload when the stream is not known), and the reader of the event that is total on
anything else found in the event log."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone

import pytest

from console.collector import kept as kept_module
from console.collector.kept import LATE, WAIT_AT_MOST, KeptMessages
from console.domain.events import BatchEvent, EventKind, MalformedEvent
from console.domain.incident import build_incident, incident_report, no_messages_why
from console.domain.kept_messages import KEPT_BYTES, KeptMessage, kept_event, kept_messages
from console.domain.masking import load_masking
from console.payloads import Payloads

T0 = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)


def loss(kind=EventKind.ATOMIC_ABANDONED, batch="b1", stream="ORDERS"):
    return BatchEvent(f"e.{batch}.{kind.value}", kind, T0, stream, batch, reason="timeout")


def seen(kept: KeptMessages, batch="b1", seqs=range(1, 4), stream="ORDERS", data=lambda s: json.dumps(
        {"n": s, "card": {"number": "4111"}}).encode()):
    for seq in seqs:
        kept.saw(batch, seq, stream, "orders.x", (("X-Card", "4111"),), data(seq), T0)


def written(kept: KeptMessages, events: list[BatchEvent]) -> list[BatchEvent]:
    """What the collector writes of these events: them, and the kept messages LATE after."""
    return kept.with_messages(events, T0) + kept.tick(T0 + LATE, timedelta(days=1))


def test_a_lost_batch_keeps_its_first_and_last_masked_and_a_committed_one_nothing():
    kept = KeptMessages(Payloads(load_masking('[[mask]]\nstreams = ["ORD*"]\nfields = ["card.number"]\nheaders = ["x-card"]\n'), None))
    seen(kept, "b1", [2, 1, 3])  # order as the tap heard it: the lowest sequence is the first
    seen(kept, "b2")
    out = written(kept, [loss(EventKind.FAST_COMMITTED, "b2"), loss(batch="b1")])
    assert [e.kind for e in out] == [EventKind.FAST_COMMITTED, EventKind.ATOMIC_ABANDONED, EventKind.BATCH_MESSAGES]
    first, last = kept_messages(out[-1])
    assert (first.seq, last.seq) == (1, 3) and json.loads(first.data) == {"n": 1, "card": {"number": "***"}}
    assert out[-1].seq == 3  # the messages the batch sent, for the loss budgets
    assert dict(first.headers)["X-Card"] == "***" and b"4111" not in first.data + last.data
    assert written(kept, [loss(batch="b1"), loss(batch="b2")]) == [loss(batch="b1"), loss(batch="b2")]


def test_messages_the_publish_side_hands_over_after_the_loss_are_kept_too():
    kept = KeptMessages()
    seen(kept, "b1", [1])
    assert kept.with_messages([loss()], T0) == [loss()] and kept.tick(T0 + LATE / 2, timedelta(days=1)) == []
    seen(kept, "b1", [2, 3])  # read after the loss: the subscriptions' tasks do not keep the wire's order
    [event] = kept.tick(T0 + LATE, timedelta(days=1))
    assert [m.seq for m in kept_messages(event)] == [1, 3]


def test_a_loss_before_any_tapped_message_waits_for_its_batch_and_goes_without_after_a_while():
    """A loaded collector can read a loss well before the publish side hands over its batch, even its
    first batch: the collector says it taps the publish side, so the loss waits (CI saw none kept)."""
    kept = KeptMessages()
    kept.tapped = True  # as the collector sets it when it taps the publish side
    assert kept.with_messages([loss(batch="b1"), loss(batch="b2")], T0) == [loss(batch="b1"), loss(batch="b2")]
    assert kept.tick(T0 + LATE * 3, timedelta(days=1)) == []  # nothing of either handed over yet
    assert kept.wants("b1") and kept.wants("b2") and not kept.wants("b3")  # the tap gives it an ended batch's
    for seq in (1, 2):  # handed over late, and one after the other
        kept.saw("b1", seq, "ORDERS", "orders.x", (), b"{}", T0 + LATE * (3 + seq))
        assert kept.tick(T0 + LATE * (3 + seq), timedelta(days=1)) == []  # its publish side not quiet yet
    [event] = kept.tick(T0 + LATE * 6, timedelta(days=1))
    assert event.batch_id == "b1" and [m.seq for m in kept_messages(event)] == [1, 2] and not kept.wants("b1")
    assert kept.tick(T0 + WAIT_AT_MOST, timedelta(days=1)) == []  # b2's never came: it goes without
    seen(kept, "b2", [1])
    assert kept.tick(T0 + WAIT_AT_MOST * 2, timedelta(days=1)) == []  # and is not kept back any more


def test_an_ok_mode_gap_keeps_them_when_the_batch_commits():
    kept = KeptMessages()
    seen(kept)
    assert len(written(kept, [loss(EventKind.FAST_GAP)])) == 1
    out = written(kept, [loss(EventKind.FAST_COMMITTED)])
    assert [e.kind for e in out] == [EventKind.FAST_COMMITTED, EventKind.BATCH_MESSAGES]


def test_of_a_stream_not_known_nothing_but_its_subject_and_size_is_kept():
    kept = KeptMessages(Payloads(load_masking('[[mask]]\nstreams = ["ORD*"]\nfields = ["card.number"]\n'), None))
    seen(kept, stream=None)
    [first, last] = kept_messages(written(kept, [loss(stream=None)])[-1])
    assert first.data == b"" and first.headers == () and first.cut and first.size > 0


def test_a_long_payload_is_cut_and_a_held_cut_one_with_field_rules_is_masked_whole(monkeypatch):
    kept = KeptMessages()
    seen(kept, seqs=[1], data=lambda s: b"y" * (KEPT_BYTES * 3))
    [only] = kept_messages(written(kept, [loss()])[-1])
    assert len(only.data) == KEPT_BYTES and only.cut and only.size == KEPT_BYTES * 3
    monkeypatch.setattr(kept_module, "HELD_PAYLOAD", 10)
    masked = KeptMessages(Payloads(load_masking('[[mask]]\nstreams = ["ORD*"]\nfields = ["card.number"]\n'), None))
    seen(masked, seqs=[1])
    [whole] = kept_messages(written(masked, [loss()])[-1])
    assert whole.data == b"***"


def test_what_is_held_is_bounded_in_bytes_and_in_time(monkeypatch):
    monkeypatch.setattr(kept_module, "HELD_BYTES", 10_000)
    kept = KeptMessages()
    for n in range(100):
        seen(kept, f"b{n}", seqs=[1, 2], data=lambda s: b"z" * 1000)
    assert kept._held <= 10_000 and "b99" in kept._open and "b0" not in kept._open
    kept.tick(T0 + timedelta(seconds=60), timedelta(seconds=30))
    assert kept._held == 0 and not kept._open


def test_an_incident_shows_the_kept_messages_and_says_why_when_there_are_none():
    messages = [KeptMessage("first", 1, "orders.x", (), b"{}", 2)]
    event = kept_event(loss(), messages)
    incident = build_incident("b1", [loss(), event])
    assert incident is not None and incident.messages == tuple(messages) and event not in incident.seen_by_tap
    bare = build_incident("b1", [loss()])
    assert bare is not None and "stores none of its messages" in no_messages_why(bare)
    assert "--tap-publish-side" in incident_report(bare)


def _detail(**changes) -> str:
    message = {"seq": 1, "subject": "s", "headers": [["a", "b"]], "data": base64.b64encode(b"x").decode(),
               "size": 1, "cut": False}
    message.update(changes)
    return json.dumps({"first": message})


@pytest.mark.parametrize("detail", [
    "", "[]", "{}", '{"middle": {}}', json.dumps({"first": []}),
    _detail(seq=0), _detail(seq="1"), _detail(seq=2 ** 64), _detail(size=-1), _detail(cut="no"),
    _detail(data="not base64!"), _detail(data=base64.b64encode(b"x" * (KEPT_BYTES + 1)).decode()),
    _detail(headers=[["a"]]), _detail(headers=[["a", 1]]), _detail(headers=[["a", "b"]] * 33),
    _detail(subject="x" * 5000), _detail(subject=None), _detail(extra=1),
    "[" * 100_000, '{"first": ' * 5000,
])
def test_a_kept_messages_event_that_is_not_one_is_one_typed_error_and_the_incident_says_so(detail):
    event = BatchEvent("e.messages", EventKind.BATCH_MESSAGES, T0, "ORDERS", "b1", detail=detail)
    with pytest.raises(MalformedEvent):
        kept_messages(event)
    incident = build_incident("b1", [loss(), event])
    assert incident is not None and incident.messages == ()
    assert "could not be read" in no_messages_why(incident)


def test_control_characters_in_a_kept_message_stay_out_of_the_report():
    messages = [KeptMessage("first", 1, "orders.x", (("X-A", "line\nbreak\x1b[31m"),), b"text\x1b[2J", 10)]
    incident = build_incident("b1", [loss(), kept_event(loss(), messages)])
    from console.domain.kept_messages import ShownMessage

    shown = [ShownMessage("first", 1, "orders.x", messages[0].headers, "text\x1b[2J\n<script>", "text, 10 bytes")]
    report = incident_report(incident, messages=shown)
    assert "\x1b" not in report and "    X-A: line?break?[31m" in report and "    <script>" in report
