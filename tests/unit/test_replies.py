import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.domain import replies
from console.domain.codes import ERROR_CODES
from console.domain.fast_ingest import MAX_FLOW
from console.domain.wire import load_object
from console.domain.server_versions import ServerRelease
from console.domain.replies import ApiError, FlowAck, FlowError, FlowGap, MalformedReply, PubAck, Staged, to_reply


def test_every_captured_reply_parses(vectors):
    bodies = vectors.replies()
    assert len(bodies) > (100 if vectors.fast_ingest else 40)
    for label, body in bodies:
        reply = to_reply(body)
        assert isinstance(reply, (Staged, ApiError, FlowAck, FlowGap, FlowError, PubAck)), label


def test_captured_error_descriptions_match_the_code_table(vectors):
    seen = set()
    for _, body in vectors.replies():
        reply = to_reply(body)
        error = reply.error if isinstance(reply, FlowError) else reply
        if isinstance(error, ApiError) and error.err_code in ERROR_CODES:
            seen.add(error.err_code)
            expected = ERROR_CODES[error.err_code]
            assert error.description.startswith(expected.description)
            assert error.code == expected.http
    atomic, fast = {10174, 10176, 10177, 10185, 10199, 10201, 10210}, {10205, 10206, 10207, 10208, 10211}
    if "inflight-limit-called-incomplete" in {d.id for d in ServerRelease(vectors.version, None).divergences()}:
        atomic.discard(10210)
    assert seen >= (atomic | fast if vectors.fast_ingest else atomic)
    assert vectors.fast_ingest or not seen & fast


def test_flow_ack_reads_seq_and_msgs():
    assert to_reply('{"type":"ack","seq":10,"msgs":10}') == FlowAck(seq=10, msgs=10)


def test_gap_last_seq_is_the_first_lost_sequence():
    gap = to_reply('{"type":"gap","last_seq":3,"seq":5}')
    assert gap == FlowGap(first_lost_seq=3, seq=5)
    assert gap.lost == 2


def test_per_message_error_keeps_the_server_text():
    reply = to_reply('{"type":"err","seq":2,"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 46"}}')
    assert reply == FlowError(seq=2, error=ApiError(10071, "wrong last sequence: 46", 400))


def test_puback_with_batch_count_domain_and_duplicate():
    assert to_reply('{"stream":"S2","domain":"hub","seq":50,"batch":"big","count":50}') == PubAck(
        "S2", 50, "big", 50, False, "hub"
    )
    assert to_reply('{"stream":"FAST","seq":49,"duplicate": true,"batch":"k1","count":1}').duplicate is True


def test_error_reply_names_the_stream():
    reply = to_reply('{"error":{"code":429,"err_code":10210,"description":"atomic publish too many inflight"},"stream":"ERR","seq":0}')
    assert reply == ApiError(10210, "atomic publish too many inflight", 429, "ERR")


def test_empty_body_is_a_staged_message():
    assert to_reply(b"") == Staged()


def test_unknown_fields_are_ignored():
    assert to_reply('{"type":"ack","seq":1,"msgs":2,"future":"x"}') == FlowAck(1, 2)


@pytest.mark.parametrize(
    "body, reason",
    [
        ("not json", "not JSON"),
        ("[1,2]", "not a JSON object"),
        ('{"type":"ack","seq":-1,"msgs":2}', "'seq'"),
        ('{"type":"ack","seq":"1","msgs":2}', "'seq'"),
        ('{"type":"hello"}', "unknown type"),
        ('{"seq":3}', "without a stream"),
        ('{"error":"boom"}', "not an object"),
        ('{"type":"err","seq":1,"error":{"err_code":1}}', "without a description"),
    ],
)
def test_malformed_replies_say_why(body, reason):
    with pytest.raises(MalformedReply) as info:
        to_reply(body)
    assert reason in info.value.reason


def test_each_code_a_publisher_is_told_about_raises_its_own_error_from_the_one_table():
    from console.errors import BatchIncompleteError, BatchServerError, TooManyInflightError, batch_server_error

    assert type(batch_server_error(10176, "atomic publish batch is incomplete")) is BatchIncompleteError
    assert type(batch_server_error(10211, "batch publish too many inflight", 429)) is TooManyInflightError
    assert type(batch_server_error(10071, "wrong last sequence: 4")) is BatchServerError  # outside the table


_NUMBER = st.one_of(st.integers(-5, 2**64).map(str), st.from_regex(r"0[0-9]{1,3}", fullmatch=True),
                    st.sampled_from(["", "1e3", "1.0", '"1"', "-0", "99999", "65535", "65536", "9" * 19]))


def _full_read(data: bytes):
    try:
        return replies._decode(load_object(data, MalformedReply))
    except MalformedReply:
        return "refused"


@given(_NUMBER, _NUMBER)
@settings(deadline=None)
def test_the_servers_plain_acks_and_gaps_read_without_the_json_parser_as_with_it(first, second):
    """The tap's fast readers of the server's ack and gap (PLAIN_ACK, PLAIN_GAP) take only what the JSON
    parser reads, and read it as it does: a leading zero, a sign, a fraction or a number past int64 is the
    full parser's to refuse or read."""
    gap = b'{"type":"gap","last_seq":%s,"seq":%s}' % (first.encode(), second.encode())
    try:
        fast = to_reply(gap)
    except MalformedReply:
        fast = "refused"
    assert fast == _full_read(gap)
    ack = b'{"type":"ack","seq":%s,"msgs":%s}' % (first.encode(), second.encode())
    if (plain := replies.PLAIN_ACK.fullmatch(ack)) is not None and 1 <= int(plain[2]) <= MAX_FLOW:
        assert FlowAck(int(plain[1]), int(plain[2])) == _full_read(ack)


_STREAMS = st.one_of(st.sampled_from(["BATCH_CONSOLE_EVENTS", "S", "a-b", "Ünï", 'q"t', "b\\s", "sp ace", "x.y", ""]),
                     st.text(max_size=8))


@given(_STREAMS, _STREAMS, _NUMBER, st.sampled_from(["", ',"duplicate":true', ',"domain":"hub"', ' ']))
@settings(deadline=None)
def test_the_event_logs_plain_pub_ack_reads_as_the_json_parser_reads_it(expected, named, seq, tail):
    """The event log's acknowledgements: a stream's plain PubAck, read at once, is stored exactly when
    the full reading says so (a name its JSON would escape, or one no stream has, is the parser's)."""
    from console.broker.acks import STORED, answer_of, plain_pub_ack
    from console.broker.capture import Inbound

    if (plain := plain_pub_ack(expected)) is None:
        return
    body = b'{"stream":%s,"seq":%s%s}' % (json_text(named), seq.encode(), tail.encode())
    fast = answer_of(Inbound("_INBOX.x.1", body), expected, plain)
    assert fast == answer_of(Inbound("_INBOX.x.1", body), expected)
    if fast is STORED:
        assert _full_read(body) == PubAck(expected, int(seq))


def json_text(value: str) -> bytes:
    import json
    return json.dumps(value, ensure_ascii=False).encode()
