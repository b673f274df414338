from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

import pytest

from console.domain.messages import MalformedAckSubject, StoredMessage, in_batch_order, preview, to_ack_metadata
from console.ui.replay import message_html, parse_start_time
from console.ui.stream import replay_link

T = datetime(2026, 11, 21, 9, 30, tzinfo=timezone.utc)


def message(seq, payload=b"", headers=(), subject="orders.new"):
    return StoredMessage(subject, seq, seq, T, tuple(headers), payload)


def test_ack_subject_metadata_in_the_short_form():
    meta = to_ack_metadata("$JS.ACK.ORDERS.ops.2.41.7.1795240227072504048.12")
    assert (meta.stream, meta.consumer, meta.delivered, meta.stream_seq, meta.consumer_seq, meta.pending) == \
        ("ORDERS", "ops", 2, 41, 7, 12)
    assert meta.time == datetime(2026, 11, 21, 5, 50, 27, 72504, tzinfo=timezone.utc)


def test_ack_subject_metadata_with_domain_and_account_hash():
    meta = to_ack_metadata("$JS.ACK.hub.ACCHASH.ORDERS.ops.1.5.5.1795240227072504048.0.rnd")
    assert (meta.stream, meta.consumer, meta.stream_seq, meta.pending) == ("ORDERS", "ops", 5, 0)


@pytest.mark.parametrize("reply", ["_INBOX.abc", "$JS.ACK.ORDERS.ops.x.1.1.1.0", "$JS.ACK.too.short"])
def test_anything_else_is_a_malformed_ack_subject(reply):
    with pytest.raises(MalformedAckSubject):
        to_ack_metadata(reply)


def test_json_is_pretty_printed_and_escaped():
    shown = preview(b'{"note": "<b>hi</b>", "n": 1}')
    assert shown.kind == "json"
    assert shown.text == '{\n  &quot;note&quot;: &quot;&lt;b&gt;hi&lt;/b&gt;&quot;,\n  &quot;n&quot;: 1\n}'


def test_text_is_escaped_and_binary_becomes_hex():
    assert preview(b"<img src=x onerror=alert(1)>").text == "&lt;img src=x onerror=alert(1)&gt;"
    binary = preview(bytes([0, 1, 2, 255]))
    assert (binary.kind, binary.text, binary.size) == ("hex", "00 01 02 ff", 4)
    assert preview(b"").kind == "empty"


def test_a_large_payload_is_capped_even_when_the_cap_cuts_a_character():
    shown = preview("é".encode() * 3000, cap=4097)  # 2-byte characters, an odd cap
    assert (shown.kind, shown.size, shown.truncated) == ("text", 6000, True)
    assert shown.text == "é" * 2048


def test_a_batch_is_put_in_batch_sequence_order():
    parts = [message(s, headers=[("Nats-Batch-Id", "b"), ("Nats-Batch-Sequence", str(n))]) for s, n in
             [(12, 3), (10, 1), (11, 2)]]
    assert [m.batch_seq for m in in_batch_order(parts)] == [1, 2, 3]


def test_a_message_renders_escaped_with_its_batch_headers_highlighted():
    rendered = message_html(message(3, b"<script>alert(1)</script>", [("Nats-Batch-Id", "<b>x</b>"),
                                                                       ("Nats-Batch-Sequence", "1"), ("Other", "y")],
                                    subject="a.<i>"))
    assert "<script>" not in rendered and "<b>x</b>" not in rendered and "<i>" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    assert rendered.count("background:#fff3bf") == 2  # the two batch headers, not "Other"


def test_a_start_time_without_a_zone_is_utc():
    assert parse_start_time("2026-11-21T09:30:00") == T
    assert parse_start_time("  ") is None
    with pytest.raises(ValueError):
        parse_start_time("yesterday")


def test_a_replay_link_gives_the_replay_page_its_stream_and_start_time_back():
    assert replay_link("ORDERS") == "/replay?stream=ORDERS"
    link = urlsplit(replay_link("ORDERS", T))
    query = parse_qs(link.query)
    assert link.path == "/replay" and query["stream"] == ["ORDERS"]
    assert parse_start_time(query["start_time"][0]) == T
