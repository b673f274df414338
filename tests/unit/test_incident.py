from datetime import datetime, timedelta, timezone

from console.domain.events import BatchEvent, EventKind
from console.domain.incident import build_incident, incident_report, timeline
from console.ui.incident import report_filename

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)


def at(seconds):
    return T0 + timedelta(seconds=seconds)


EVENTS = [
    BatchEvent("ctx.leader0", EventKind.CONTEXT, at(-200), "ORDERS", reason="n1", detail="stream_leader_elected"),
    BatchEvent("ctx.leader", EventKind.CONTEXT, at(-120), "ORDERS", reason="n2", detail="stream_leader_elected"),
    BatchEvent("ctx.update", EventKind.CONTEXT, at(-30), "ORDERS", reason="modify", detail="stream_action"),
    BatchEvent("other.stream", EventKind.ATOMIC_ABANDONED, at(-10), "BILLING", "x9", reason="timeout"),
    BatchEvent("status", EventKind.COLLECTOR_STATUS, at(-5)),
    BatchEvent("adv.1", EventKind.ATOMIC_ABANDONED, at(0), "ORDERS", "b-1", reason="incomplete", account="APP"),
    BatchEvent("adv.2", EventKind.ATOMIC_ABANDONED, at(20), "ORDERS", "b-2", reason="timeout"),
    BatchEvent("gap.far", EventKind.FAST_GAP, at(900), "ORDERS", "f-1", lost=2, first_lost_seq=4, seq=6),
]


def test_an_incident_has_the_loss_and_the_same_streams_events_in_the_window():
    incident = build_incident("b-1", EVENTS)
    assert incident.loss.event_id == "adv.1"
    assert [e.event_id for e in incident.context] == ["ctx.leader0", "ctx.leader", "ctx.update", "adv.2"]
    assert incident.seen_by_tap == ()
    assert [what for _, _, what in timeline(incident)] == [
        "stream leader elected: n1", "stream leader elected: n2 (was n1)", "context: modify stream_action",
        "▶ atomic abandoned batch b-1: reason incomplete", "atomic abandoned batch b-2: reason timeout"]


def test_a_fast_batch_shows_what_the_tap_saw_and_prefers_its_end_to_its_gaps():
    events = [BatchEvent("s", EventKind.FAST_STARTED, at(0), None, "f", flow=10, gap_mode="fail"),
              BatchEvent("g", EventKind.FAST_GAP, at(1), "F", "f", lost=1, first_lost_seq=20, seq=21),
              BatchEvent("e", EventKind.FAST_ENDED_EARLY, at(1), "F", "f", reason="gap")]
    incident = build_incident("f", events)
    assert incident.loss.event_id == "e"
    assert [e.event_id for e in incident.seen_by_tap] == ["s", "g"]


def test_no_loss_no_incident():
    assert build_incident("never", EVENTS) is None


def test_the_report_names_the_batch_and_lists_the_timeline_readable_as_a_file():
    report = incident_report(build_incident("b-1", EVENTS), "http://console:8050/replay?stream=ORDERS",
                             advice="Check the publisher -> its pacing")
    assert report.startswith("# Incident: batch b-1\n")
    assert "- **Account**: APP" in report and "<http://console:8050/replay?stream=ORDERS>" in report
    assert report.count("\n| 2026-11-21 ") == 5 and "T09:" not in report  # formatted times, no raw ISO
    assert "| **▶ atomic abandoned batch b-1: reason incomplete** |" in report  # the batch's row stands out
    assert "## What to do\n\nCheck the publisher -> its pacing" in report and "&gt;" not in report
    assert "Not listed: 1 atomic abandoned on other streams." in report
    assert "atomic batches have no `$FI` traffic" in report


def test_other_streams_and_unknown_streams_are_folded_into_counted_lines():
    from console.domain.incident import folded_lines

    noise = [BatchEvent(f"flow.{i}", EventKind.FAST_FLOW_CHANGED, at(i % 100), None, f"other-{i}", flow=5,
                        previous_flow=10) for i in range(214)]
    noise += [BatchEvent(f"gap.{i}", EventKind.FAST_GAP, at(i), "INGEST", f"g-{i}", lost=1, first_lost_seq=1, seq=2)
              for i in range(3)]
    incident = build_incident("b-1", [*EVENTS, *noise])
    assert len(timeline(incident)) == 5  # the batch, its stream, the leader elections
    assert folded_lines(incident) == ["214 fast flow changed on streams not yet known",
                                      "3 fast gap on other streams", "1 atomic abandoned on other streams"]


def test_a_report_file_name_keeps_only_safe_characters():
    assert report_filename("b-1") == "incident-b-1.md"
    assert report_filename("../<x> y") == "incident-..__x__y.md"


def test_wire_text_in_the_report_is_inert_markdown():
    from console.domain.events import BatchEvent, EventKind

    evil = '<img src=x onerror=alert(1)>|[x](http://e)*'
    loss = BatchEvent("adv.evil", EventKind.ATOMIC_ABANDONED, EVENTS[0].time, "ORDERS", evil, reason="timeout")
    report = incident_report(build_incident(evil, [loss]))
    assert "<img" not in report and "&lt;img" in report
    assert "\\[x\\](http://e)\\*" in report and "\\|" in report


def test_a_loss_recorded_under_no_stream_takes_the_stream_its_batch_was_later_named_by():
    gap = BatchEvent("fi.b.gap.5", EventKind.FAST_GAP, at(0), None, "b", gap_mode="ok", seq=5, first_lost_seq=4, lost=1)
    named = BatchEvent("fi.b.attributed", EventKind.FAST_ATTRIBUTED, at(2), "ORDERS", "b", gap_mode="ok")
    elsewhere = BatchEvent("adv.1", EventKind.ATOMIC_ABANDONED, at(1), "ORDERS", "a1", reason="timeout")
    incident = build_incident("b", [gap, elsewhere, named])
    assert incident.loss.stream == "ORDERS" and elsewhere in incident.context
