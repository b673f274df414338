"""The probe report: typed parts inside, the same `probe --json` object outside."""

from console.domain.replies import FlowGap, PubAck
from console.errors import BatchIncompleteError
from console.probe import Failure, FlowChange, MessageError, ProbeReport
from console.ui.probe import report_markdown


def test_the_json_keeps_the_field_names_scripts_read():
    report = ProbeReport("fast", "S", "s.x", batch_ids=["b1"], flow_changes=[FlowChange(10, 100, 50)],
                         gaps=[FlowGap(first_lost_seq=4, seq=6)], lost=2, errors=[MessageError(8, 10071, "wrong last")],
                         puback=PubAck("S", 20, "b1", 18), error=Failure.of(BatchIncompleteError(10176, "incomplete")))
    out = report.to_json()
    assert out["flow_changes"] == [{"ack_seq": 10, "from": 100, "to": 50}]
    assert out["gaps"] == [{"first_lost_seq": 4, "seq": 6, "lost": 2}]
    assert out["errors"] == [{"seq": 8, "err_code": 10071, "description": "wrong last"}]
    assert out["puback"] == {"stream": "S", "seq": 20, "batch": "b1", "count": 18, "duplicate": False}
    assert out["error"] == {"type": "BatchIncompleteError", "message": "[10176] incomplete", "err_code": 10176,
                            "description": "incomplete", "code": 400}
    assert Failure.of(TimeoutError("late")) == Failure("TimeoutError", "late")


def test_the_page_reads_the_typed_parts_and_escapes_the_servers_text():
    report = ProbeReport("fast", "S", "s.x", gaps=[FlowGap(4, 6)], errors=[MessageError(8, 10071, "<b>x</b>")])
    text = report_markdown(report)
    assert "gap: 2 lost from seq 4" in text and "[10071] &lt;b&gt;x&lt;/b&gt;" in text
