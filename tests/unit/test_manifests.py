"""Loss manifests from each kind of loss's events, their states, and the wire's hostile records."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from console.domain.events import BatchEvent, EventKind
from console.domain.incident import manifest_lines
from console.domain.kept_messages import KeptMessage
from console.domain.manifests import (
    MalformedManifest, Manifest, RepairReport, Span, manifest_id, manifest_of, merged, parse_manifest, parse_report,
    reopened, verdict, with_report,
)
from console.domain.publisher import Publisher

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc)


def ev(kind: EventKind, n: int = 0, **fields) -> BatchEvent:
    fields.setdefault("stream", "ORDERS")
    fields.setdefault("batch_id", "b1")
    return BatchEvent(f"e{kind.value}{n}", kind, T0 + timedelta(seconds=n), **fields)


def kept(last: int) -> BatchEvent:
    messages = {"first": KeptMessage("first", 1, "orders.x", (), b"a", 1).to_dict(),
                "last": KeptMessage("last", last, "orders.x", (), b"z", 1).to_dict()}
    return ev(EventKind.BATCH_MESSAGES, 9, detail=json.dumps(messages))


@pytest.mark.parametrize("events,kind,missing,certainty", [
    ([ev(EventKind.FAST_GAP, 1, first_lost_seq=5, seq=8, lost=3)], "fast_gap", [Span(5, 7)], "exact"),
    ([ev(EventKind.FAST_GAP, 1, first_lost_seq=5, seq=6), ev(EventKind.FAST_GAP, 2, first_lost_seq=9, seq=11)],
     "fast_gap", [Span(5, 5), Span(9, 10)], "exact"),
    ([ev(EventKind.FAST_ERROR, 1, seq=4, err_code=10071, description="wrong last sequence: 46")], "fast_error",
     [Span(4, 4)], "exact"),
    ([ev(EventKind.FAST_GAP, 1, first_lost_seq=5, seq=6), ev(EventKind.FAST_ENDED_EARLY, 2, count=4, reason="gap")],
     "fast_ended", [Span(5, None)], "bounded"),
    ([ev(EventKind.FAST_LOST, 1, seq=20, err_code=10208)], "fast_lost", [Span(21, None)], "bounded"),
    ([ev(EventKind.FAST_DROPPED, 1, seq=30, inferred=True)], "fast_dropped", [Span(31, None)], "inferred"),
    ([ev(EventKind.ATOMIC_ABANDONED, 1, reason="timeout")], "atomic_abandoned", [Span(1, None)], "bounded"),
    ([ev(EventKind.ATOMIC_ABANDONED, 1, reason="timeout"), kept(40)], "atomic_abandoned", [Span(1, 40)], "exact"),
    ([ev(EventKind.ATOMIC_LOST, 1, seq=12, reason="leader_change")], "atomic_lost", [Span(1, 12)], "exact"),
])
def test_each_kind_of_loss_says_exactly_what_is_missing_and_how_sure(events, kind, missing, certainty):
    m = manifest_of(events)
    assert (m.kind, list(m.missing), m.certainty) == (kind, missing, certainty)
    assert m.id == manifest_id("ORDERS", "b1") and m.state == "open" and m.rests_on


def test_a_loss_whose_stream_is_not_named_yet_has_no_manifest_until_a_later_event_names_it():
    gap = ev(EventKind.FAST_GAP, 1, first_lost_seq=5, seq=6, stream=None)
    assert manifest_of([gap]) is None
    named = manifest_of([gap, ev(EventKind.FAST_COMMITTED, 2, count=11)])
    assert named.stream == "ORDERS" and named.missing == (Span(5, 5),)


def test_the_publisher_is_named_when_an_event_names_it():
    who = Publisher(name="order-svc", lang="python", version="2.7")
    m = manifest_of([ev(EventKind.ATOMIC_ABANDONED, 1, reason="timeout", publisher=who)])
    assert m.publisher.startswith("order-svc (python 2.7)")


def test_spans_merge_and_an_open_one_takes_in_the_rest():
    assert merged([Span(5, 5), Span(6, 8), Span(10, 10)]) == (Span(5, 8), Span(10, 10))
    assert merged([Span(9, None), Span(3, 4), Span(12, 20)]) == (Span(3, 4), Span(9, None))


def manifest(**changes) -> Manifest:
    base = manifest_of([ev(EventKind.FAST_GAP, 1, first_lost_seq=5, seq=8)])
    return Manifest(**{**base.__dict__, **changes})


def report(state="resent", resent=(Span(5, 7),), through=12) -> RepairReport:
    return RepairReport(manifest_id("ORDERS", "b1"), "ORDERS", "b1", state, resent, "", through)


def test_repaired_only_when_every_missing_message_is_in_the_stream_once():
    m = with_report(manifest(), report())
    assert m.state == "resent" and m.version == 2
    assert verdict(m, {}) is m  # nothing there yet: still resent
    assert verdict(m, {5: 1, 6: 1}).state == "partly"
    doubled = verdict(m, {5: 1, 6: 2, 7: 1})
    assert doubled.state == "partly" and "more than once" in doubled.why
    done = verdict(m, {5: 1, 6: 1, 7: 1, 3: 4})
    assert done.state == "repaired" and done.found == (Span(5, 7),)
    assert with_report(done, report("not_repairable")) is done  # a later claim changes a verdict never


def test_an_open_end_is_closed_where_the_publisher_says_it_stopped():
    open_ended = manifest(missing=(Span(5, None),), kind="fast_ended")
    m = with_report(open_ended, report(resent=(Span(5, 9),), through=9))
    assert verdict(m, {5: 1, 6: 1, 7: 1, 8: 1, 9: 1}).state == "repaired"
    assert verdict(m, {5: 1, 6: 1, 7: 1, 8: 1}).state == "partly"


def test_more_evidence_after_a_repair_began_opens_it_again():
    m = verdict(with_report(manifest(), report(through=12)), {5: 1, 6: 1, 7: 1})
    grown = manifest_of([ev(EventKind.FAST_GAP, 1, first_lost_seq=5, seq=8), ev(EventKind.FAST_GAP, 3, first_lost_seq=10, seq=11)])
    again = reopened(m, grown)
    assert again.state == "open" and again.missing == (Span(5, 7), Span(10, 10)) and again.version == m.version + 1


@pytest.mark.parametrize("hostile", [
    b"[" * 100_000 + b"]" * 100_000, b"not json", b"{}", b'{"v": 2}',
    json.dumps({**manifest().as_json(), "id": "0" * 24}).encode(),  # another batch's id
    json.dumps({**manifest().as_json(), "stream": "a.b"}).encode(),
    json.dumps({**manifest().as_json(), "batch": "x" * 65}).encode(),
    json.dumps({**manifest().as_json(), "missing": [[0, 3]]}).encode(),
    json.dumps({**manifest().as_json(), "missing": [[5, 3]]}).encode(),
    json.dumps({**manifest().as_json(), "missing": [[1, 2 ** 64]]}).encode(),
    json.dumps({**manifest().as_json(), "missing": [[1, True]]}).encode(),
    json.dumps({**manifest().as_json(), "missing": [[1, 1]] * 300}).encode(),
    json.dumps({**manifest().as_json(), "state": "fixed"}).encode(),
    json.dumps({**manifest().as_json(), "why": "a\x1b[2Jb"}).encode(),
    json.dumps({**manifest().as_json(), "time": 1}).encode(),
    json.dumps({**manifest().as_json(), "version": 0}).encode(),
    json.dumps({**manifest().as_json(), "rests_on": "r" * 3000}).encode(),
])
def test_a_manifest_that_is_not_one_is_one_typed_error(hostile):
    with pytest.raises(MalformedManifest):
        parse_manifest(hostile)


def test_a_manifest_reads_back_as_it_was_written():
    m = with_report(manifest(), report())
    assert parse_manifest(m.to_json()) == m


@pytest.mark.parametrize("hostile", [
    b"nope", json.dumps({**json.loads(report().to_json()), "resent": [[5, None]]}).encode(),
    json.dumps({**json.loads(report().to_json()), "resent": []}).encode(),
    json.dumps({**json.loads(report().to_json()), "through": 3}).encode(),  # less than it says it sent again
    json.dumps({**json.loads(report().to_json()), "state": "repaired"}).encode(),  # only the console says so
    json.dumps({**json.loads(report().to_json()), "id": manifest_id("OTHER", "b1")}).encode(),
])
def test_a_report_that_is_not_one_is_one_typed_error(hostile):
    with pytest.raises(MalformedManifest):
        parse_report(hostile)


def test_kept_messages_are_republished_only_when_they_are_the_whole_batch_whole_and_unmasked():
    from console.commands import RepublishKept
    from console.domain.masking import load_masking, Masking

    one, two = (KeptMessage("first", 1, "orders.x", (), b"a", 1), KeptMessage("last", 2, "orders.x", (), b"b", 1))
    assert RepublishKept("ORDERS", "b1", (two, one)).whole(Masking()) == [one, two]
    with pytest.raises(ValueError, match="first and last messages only"):
        RepublishKept("ORDERS", "b1", (one, KeptMessage("last", 40, "orders.x", (), b"z", 1))).whole(Masking())
    with pytest.raises(ValueError, match="cut"):
        RepublishKept("ORDERS", "b1", (one, KeptMessage("last", 2, "orders.x", (), b"b", 9000, cut=True))).whole(Masking())
    with pytest.raises(ValueError, match="masking rules cover ORDERS"):
        RepublishKept("ORDERS", "b1", (one, two)).whole(load_masking('[[mask]]\nstreams = ["ORD*"]\nfields = ["card"]\n'))
    with pytest.raises(ValueError, match="nothing of batch b1 was kept"):
        RepublishKept("ORDERS", "b1", ()).whole(Masking())


def test_an_open_manifest_nobody_answered_says_who_holds_the_messages_and_a_repaired_one_what_was_read_back():
    opened = Manifest(manifest_id("S", "b1"), "S", "b1", "fast_gap", (Span(7, 9),), "exact", "the server's gap ack",
                      datetime(2026, 12, 3, tzinfo=timezone.utc))
    missing, repair = manifest_lines(opened)
    assert missing.startswith("Missing: batch sequence(s) 7-9 (exact)")
    assert repair.startswith("Repair: open (no publisher taking part") and "only the batch's publisher holds" in repair
    done = replace(opened, state="repaired", why="every missing message is in the stream once (3)",
                   resent=(Span(7, 9),), found=(Span(7, 9),))
    assert manifest_lines(done)[1] == ("Repair: repaired (every missing message is in the stream once (3)); "
                                       "sent again: 7-9; read back once: 7-9.")
