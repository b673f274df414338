"""The Live page's data, rendered without a server."""

import json
from datetime import datetime, timedelta, timezone

from console.domain.events import BatchEvent, EventKind
from console.domain.live_model import LiveModel
from console.ui.live import INTERVAL, LivePage, active_frame, flow_data, interval_data, recent_frame, status_text

NOW = datetime(2026, 11, 21, 4, 0, tzinfo=timezone.utc)


def model_with_traffic() -> LiveModel:
    model = LiveModel()
    model.apply(BatchEvent("a", EventKind.ATOMIC_ABANDONED, NOW - timedelta(seconds=90), "S", "<img src=x onerror=alert(1)>", reason="timeout"))
    model.apply(BatchEvent("s", EventKind.FAST_STARTED, NOW - timedelta(seconds=5), None, "f1", gap_mode="ok", flow=100))
    model.apply(BatchEvent("g", EventKind.FAST_GAP, NOW - timedelta(seconds=4), None, "f1", gap_mode="ok", seq=300, lost=2))
    return model


def test_frames_have_their_dtypes_even_when_empty():
    empty = LiveModel()
    assert list(recent_frame(empty).dtypes.astype(str)) == ["object"] * 7
    assert len(active_frame(empty)) == 0 and str(active_frame(empty)["seq"].dtype) == "int64"


def test_interval_bars_put_each_loss_in_its_minute():
    data = interval_data(model_with_traffic(), NOW)
    minute = NOW - INTERVAL * 2  # the one loss, a minute and a bit ago
    assert [(t, r, n) for t, r, n in zip(data["t"], data["reason"], data["batches"])] == [(minute, "timeout", 1)]
    assert (data["bottom"], data["top"]) == ([0], [1])


def test_flow_lines_and_gap_marks_for_active_batches():
    lines, marks = flow_data(model_with_traffic())
    assert lines["batch"] == ["f1"] and lines["ys"] == [[100]]
    assert (marks["flow"], marks["lost"]) == ([100], [2])
    held, _ = flow_data(model_with_traffic(), NOW)  # one flow so far: held until now, a line that draws
    assert held["ys"] == [[100, 100]] and held["xs"][0][-1] == NOW and len(held["xs"][0]) == 2


def test_a_running_fast_batch_whose_stream_is_not_said_yet_is_not_shown_as_unknown():
    [stream] = active_frame(model_with_traffic())["stream"]  # f1: no final ack yet
    assert "(named at its end)" in stream and "(unknown)" not in stream


def test_the_page_builds_without_a_server_and_keeps_payload_text_as_data():
    model = model_with_traffic()
    page = LivePage(model=model, connection=lambda: "connected")
    assert page._table.value["batch_id"].tolist() == ["<img src=x onerror=alert(1)>"]
    assert page._active.value["lost"].tolist() == [2]
    assert status_text(model, "reconnecting", None, NOW).startswith("NATS reconnecting · collector SILENT")


def test_status_says_when_the_collector_was_starved_of_cpu():
    model = LiveModel()
    status = {"cpu": {"mode": "adaptive", "now": "nice 10", "left_idle_starved": 2, "note": ""}}
    model.apply(BatchEvent("st", EventKind.COLLECTOR_STATUS, NOW, detail=json.dumps(status)))
    assert "collector starved of CPU 2x" in status_text(model, "connected", None, NOW)
    model.apply(BatchEvent("st2", EventKind.COLLECTOR_STATUS, NOW, detail=json.dumps({"cpu": None})))
    assert "starved" not in status_text(model, "connected", None, NOW)


def test_status_says_when_the_collector_fell_behind_and_took_its_priority_back():
    model = LiveModel()
    status = {"cpu": {"mode": "adaptive", "now": "nice 0", "left_idle_starved": 0, "took_back_behind": 3, "note": ""}}
    model.apply(BatchEvent("st", EventKind.COLLECTOR_STATUS, NOW, detail=json.dumps(status)))
    text = status_text(model, "connected", None, NOW)
    assert "collector fell behind the server 3x" in text and "starved" not in text
    status["cpu"]["took_back_behind"] = "3<script>"  # a forged status: a count that is no count is not said
    model.apply(BatchEvent("st2", EventKind.COLLECTOR_STATUS, NOW, detail=json.dumps(status)))
    assert "behind" not in status_text(model, "connected", None, NOW)


def test_status_says_a_flood_of_losses_of_batches_never_seen_to_start_was_held_back():
    model = LiveModel()
    status = {"unsaid_by_prefix": {"_INBOX.forger\u0007<b>": 4900, "_INBOX.other": 2}}
    model.apply(BatchEvent("st", EventKind.COLLECTOR_STATUS, NOW, detail=json.dumps(status)))
    text = status_text(model, "connected", None, NOW)
    assert "held back 4,902 replies of batches never seen to start" in text
    assert "most from _INBOX.forger?<b>" in text  # printable; the Str pane escapes what is left
    model.apply(BatchEvent("st2", EventKind.COLLECTOR_STATUS, NOW, detail=json.dumps({})))
    assert "held back" not in status_text(model, "connected", None, NOW)
