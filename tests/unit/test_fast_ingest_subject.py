import pytest
from hypothesis import given, settings, strategies as st

from console.domain.fast_ingest import FastOp, FastReplySubject, GapMode, InvalidReplySubject, server_flow
from tests.soak import examples


def test_the_parser_refuses_exactly_the_subjects_the_server_refused(vectors):
    if not vectors.fast_ingest:
        pytest.skip(f"nats-server {vectors.version} has no fast ingest: it refuses no $FI subject")
    accepted, refused = [], []
    for record in vectors.records("fast"):
        invalid = any(f'"err_code":{code}' in record["body"] for code in (10206, 10207))
        (refused if invalid else accepted).append(record["subject"])
    assert len(accepted) > 60 and len(refused) >= 8
    for subject in refused:
        with pytest.raises(InvalidReplySubject):
            FastReplySubject.parse(subject)
    for subject in accepted:
        parsed = FastReplySubject.parse(subject)
        if subject.split(".")[-5] == str(parsed.flow):
            assert parsed.format() == subject


def test_parses_from_the_right_whatever_the_prefix_depth():
    seven = FastReplySubject.parse("_INBOX.b1.10.fail.1.0.$FI")
    eight = FastReplySubject.parse("_INBOX.pu1y79prfx1Ew5CU1zUQPX.2ef1aa.5.fail.10.1.$FI")
    assert (seven.prefix, seven.batch_id, seven.flow, seven.gap_mode, seven.seq, seven.op) == (
        "_INBOX", "b1", 10, GapMode.FAIL, 1, FastOp.START,
    )
    assert (eight.prefix, eight.batch_id, eight.seq, eight.op) == ("_INBOX.pu1y79prfx1Ew5CU1zUQPX", "2ef1aa", 10, FastOp.APPEND)


@pytest.mark.parametrize("token, flow", [("0", 10), ("-5", 10), ("abc", 10), ("70000", 65535), ("1000", 1000), ("7", 7)])
def test_flow_follows_the_server_coercion(token, flow):
    assert server_flow(token) == flow
    assert FastReplySubject.parse(f"p.b.{token}.ok.1.0.$FI").flow == flow


@pytest.mark.parametrize(
    "subject, reason",
    [
        ("noprefix.10.ok.1.0.$FI", "6 tokens"),
        ("p.b.10.ok.1.0.FI", "not '$FI'"),
        ("p.b.10.maybe.1.0.$FI", "gap mode 'maybe'"),
        ("p.b.10.ok.x.1.$FI", "seq 'x'"),
        ("p.b.10.ok.1.9.$FI", "op '9'"),
        ("p.b.10.ok.0.0.$FI", "below 1"),
        ("p.b.10.ok.2.0.$FI", "start (op 0) needs seq 1"),
        ("p.b.10.ok.1.1.$FI", "append (op 1) needs seq > 1"),
        ("p.b.10.ok.1.3.$FI", "not allowed at seq 1"),
        ("p." + "B" * 65 + ".10.ok.1.0.$FI", "65 characters"),
        ("p..b.10.ok.1.0.$FI", "6 tokens" if False else "empty"),
    ],
)
def test_each_rule_violation_is_named(subject, reason):
    with pytest.raises(InvalidReplySubject) as info:
        FastReplySubject.parse(subject)
    assert reason in info.value.reason


def test_single_message_commit_and_ping_are_valid_at_seq_one():
    assert FastReplySubject.parse("p.b.10.ok.1.2.$FI").op is FastOp.COMMIT
    assert FastReplySubject.parse("p.b.10.ok.1.4.$FI").op is FastOp.PING


def test_format_refuses_what_the_server_would():
    with pytest.raises(ValueError, match="flow"):
        FastReplySubject("p", "b", 0, GapMode.OK, 1, FastOp.START)
    with pytest.raises(ValueError, match="one subject token"):
        FastReplySubject("p", "a.b", 10, GapMode.OK, 1, FastOp.START)
    assert FastReplySubject("_INBOX.x", "b", 100, GapMode.FAIL, 2, FastOp.APPEND).format() == "_INBOX.x.b.100.fail.2.1.$FI"


_TOKENS = ["_INBOX", "x", "", "$FI", "ok", "fail", "OK", "0", "1", "2", "3", "4", "5", "10", "-1", "007",
           "9223372036854775807", "9223372036854775808", "00000000000000000001", "a b", "a*", ">", "é", "\x00",
           "b" * 64, "b" * 65, "٣"]


_TOKEN = st.sampled_from(_TOKENS) | st.text(max_size=5)
_SHAPED = st.tuples(st.lists(_TOKEN, min_size=0, max_size=3), _TOKEN, _TOKEN, st.sampled_from(["ok", "fail", "Ok", ""]),
                    _TOKEN, st.sampled_from(["0", "1", "2", "3", "4", "5", "01"]), st.sampled_from(["$FI", "$FI\n", "FI"])
                    ).map(lambda t: [*t[0], *t[1:]])


@settings(max_examples=examples(10), deadline=None)
@given(st.lists(_TOKEN, min_size=1, max_size=10) | _SHAPED)
def test_the_quick_path_reads_every_subject_as_the_token_by_token_reading_does(tokens):
    subject = ".".join(tokens)
    try:
        slow = FastReplySubject._parse_slowly(subject)
    except InvalidReplySubject:
        with pytest.raises(InvalidReplySubject):
            FastReplySubject.parse(subject)
        return
    quick = FastReplySubject.parse(subject)
    assert (quick.prefix, quick.batch_id, quick.flow, quick.gap_mode, quick.seq, quick.op) == (
        slow.prefix, slow.batch_id, slow.flow, slow.gap_mode, slow.seq, slow.op)
    assert quick == slow and hash(quick) == hash(slow)
