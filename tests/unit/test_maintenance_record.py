"""A maintenance's records in the event log, read back totally (the log is anyone's to write), and the
mark Live puts on a loss inside one: a label, never a reason to hide the loss."""

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from console.domain.events import BatchEvent, EventKind, MalformedEvent
from console.domain.live_model import LiveModel
from console.domain.maintenance_record import OPEN_AT_MOST, MaintenanceRecord, maintenance_record
from console.ui.live import notices_html, recent_frame
from console.queries.live import SeenLive


def _loss(when: datetime, batch: str = "b1", stream: str = "ORDERS") -> BatchEvent:
    return BatchEvent(f"lost.{batch}", EventKind.ATOMIC_ABANDONED, when, stream, batch, reason="timeout")


def test_a_record_reads_back_as_it_was_written_begun_and_ended():
    begun = MaintenanceRecord.begin("drain", ["n2"], "alice")
    assert maintenance_record(begun.event()) == begun
    ended = begun.ended(None, 2, 1, "plan safe; moved 3", steps=("MT_A: moved to n1 after 0.31 s", "x" * 400))
    assert ended.steps == ("MT_A: moved to n1 after 0.31 s", "x" * 256)
    back = maintenance_record(ended.event())
    assert back == ended and back.phase == "ended" and back.until == back.end


def _forged(**changes) -> BatchEvent:
    record = MaintenanceRecord.begin("drain", ["n2"], "alice").ended(None, 0, 0, "ok")
    detail = json.loads(record.event().detail)
    event = record.event()
    for key, value in changes.items():
        if key in ("reason", "time", "kind"):
            event = replace(event, **{key: value})
        elif value is ...:
            del detail[key]
        else:
            detail[key] = value
    return replace(event, detail=detail if isinstance(detail, str) else json.dumps(detail))


@pytest.mark.parametrize("changes", [
    {"reason": "reboot"}, {"reason": None}, {"kind": EventKind.CANARY},
    {"id": "../x"}, {"id": "a" * 33}, {"id": 7}, {"phase": "half"}, {"outcome": ...}, {"extra": 1},
    {"nodes": []}, {"nodes": ["n"] * 65}, {"nodes": "n2"}, {"nodes": ["n\x1b[2J"]}, {"nodes": ["x" * 300]},
    {"actor": ""}, {"actor": 5}, {"lost": -1}, {"lost": 10 ** 30}, {"lost": True}, {"unexpected": "1"},
    {"start": "yesterday"}, {"start": "2026-12-02T10:00:00"}, {"start": "9" * 41}, {"start": None},
    {"until": "2000-01-01T00:00:00+00:00"}, {"outcome": "x" * 2000}, {"outcome": "a\x00b"},
    {"steps": "MT_A moved"}, {"steps": ["s"] * 101}, {"steps": [7]}, {"steps": ["x" * 300]}, {"steps": ["a\x1bb"]},
])
def test_a_forged_or_broken_record_is_one_typed_error(changes):
    with pytest.raises(MalformedEvent):
        maintenance_record(_forged(**changes))


@pytest.mark.parametrize("detail", ["", "[]", "{", "1e999999", '{"id": ' * 10_000, "x" * 100_000])
def test_a_detail_that_is_not_a_record_is_one_typed_error(detail):
    event = replace(MaintenanceRecord.begin("drain", ["n2"], "a").event(), detail=detail)
    with pytest.raises(MalformedEvent):
        maintenance_record(event)


def test_live_marks_a_loss_inside_a_maintenance_and_not_one_outside_it():
    model = LiveModel()
    begun = MaintenanceRecord.begin("drain", ["n2"], "alice")
    model.apply(_loss(begun.start - timedelta(seconds=5), "before"))
    model.apply(begun.event())
    model.apply(_loss(begun.start + timedelta(seconds=1), "inside"))
    ended = begun.ended(begun.start + timedelta(seconds=40), 1, 1, "moved 3")
    model.apply(ended.event())
    model.apply(_loss(begun.start + timedelta(seconds=30), "late"))  # judged within the window's batch timeout
    model.apply(_loss(begun.start + timedelta(seconds=60), "after"))
    marks = {b.batch_id: b.maintenance for b in model.newest_first()}
    assert marks == {"before": None, "inside": "drain of n2 by alice", "late": "drain of n2 by alice", "after": None}
    frame = recent_frame(model)
    assert "during maintenance" in frame.columns and len(frame) == 4  # marked, never hidden
    notices = notices_html(model)
    assert "drain of n2 by alice" in notices and "1 batch(es) lost on the streams touched" in notices


def test_a_beginning_with_no_end_marks_losses_for_an_hour_at_most_and_a_forged_label_is_escaped():
    model = LiveModel()
    begun = MaintenanceRecord.begin("restart", ["<img src=x onerror=alert(1)>"], "mallory")
    model.apply(begun.event())
    model.apply(_loss(begun.start + OPEN_AT_MOST - timedelta(seconds=1), "within"))
    model.apply(_loss(begun.start + OPEN_AT_MOST + timedelta(seconds=1), "past"))
    assert {b.batch_id: bool(b.maintenance) for b in model.newest_first()} == {"within": True, "past": False}
    notices = notices_html(model)
    assert "<img" not in notices and "&lt;img" in notices and "under way" in notices


def test_a_reader_of_some_streams_sees_a_maintenance_without_the_ledgers_count_over_all():
    model = LiveModel()
    record = MaintenanceRecord.begin("drain", ["n2"], "alice")
    model.apply(record.ended(None, 3, 0, "moved").event())
    whole, limited = notices_html(model), notices_html(SeenLive(model, lambda s: s == "TEAM_A"))
    assert "3 batch(es) lost" in whole
    assert "drain of n2 by alice" in limited and "lost" not in limited


def test_records_are_bounded_to_the_newest_twenty():
    model = LiveModel()
    start = datetime.now(timezone.utc)
    for i in range(50):
        model.apply(replace(MaintenanceRecord.begin("drain", [f"n{i}"], "a"), start=start).event())
    assert len(model.maintenances) == 20
