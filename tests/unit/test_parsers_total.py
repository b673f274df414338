"""Every parser of outside input is total: a value, or MalformedInput, whatever the bytes."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from console.domain.advisories import ABANDONED_TYPE, to_batch_abandoned
from console.domain.advisory_events import IgnoredAdvisory, advisory_to_event
from console.domain.events import BatchEvent, EventKind, MalformedEvent, event_from_json
from console.domain.fast_ingest import FastReplySubject
from console.domain.fast_tracker import FastBatchTracker
from console.domain.replies import FlowGap, to_reply
from console.domain.wire import INT64_MAX, MalformedInput, stream_name_problem

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)
HOSTILE = [
    b"[" * 50000,
    b'{"a":' * 5000,
    b"\xff\xfe\x00",
    b"9" * 5000,
    b'{"seq":' + b"9" * 5000 + b"}",
    b"1e999",
    b" " * 70000,
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=20,
)
ADVISORY_KEYS = ["type", "id", "timestamp", "stream", "batch", "reason", "account", "domain", "action", "consumer"]
REPLY_KEYS = ["type", "seq", "msgs", "last_seq", "stream", "batch", "count", "duplicate", "domain", "error"]
EVENT_KEYS = ["event_id", "kind", "time", "stream", "batch_id", "reason", "gap_mode", "flow", "previous_flow", "seq",
              "first_lost_seq", "lost", "acks", "err_code", "description", "count", "stream_seq", "eob", "inferred",
              "account", "domain", "detail", "publisher", "probable_stream", "cluster", "v"]


def objects(keys: list[str], base: dict) -> st.SearchStrategy[bytes]:
    """A valid body with some fields replaced by anything JSON can hold."""
    return st.dictionaries(st.sampled_from(keys), json_values, max_size=4).map(lambda over: json.dumps({**base, **over}).encode())


def bodies(keys: list[str], base: dict) -> st.SearchStrategy[bytes]:
    return st.binary(max_size=200) | objects(keys, base) | st.sampled_from(HOSTILE)


def assert_sane_event(event: BatchEvent) -> None:
    """What every sink needs: int64 numbers, a valid subject, JSON that reads back the same."""
    for value in (event.seq, event.first_lost_seq, event.lost, event.acks, event.count, event.stream_seq):
        assert value is None or 0 <= value <= INT64_MAX
    assert event.stream is None or stream_name_problem(event.stream) is None
    assert event_from_json(event.to_json()) == event


ADVISORY = {"type": ABANDONED_TYPE, "id": "gLfOmcoOv5EsDe2LPiUdMI", "timestamp": "2026-11-21T02:47:57.346469731Z",
            "stream": "ADV", "batch": "b", "reason": "timeout"}


@SETTINGS
@given(bodies(ADVISORY_KEYS, ADVISORY))
@example(json.dumps({**ADVISORY, "stream": "a b"}).encode())
@example(json.dumps({**ADVISORY, "timestamp": "0001-01-01T00:00:00+01:00"}).encode())
def test_advisories_parse_or_are_malformed(body):
    try:
        event = advisory_to_event(body)
    except (MalformedInput, IgnoredAdvisory):
        return
    assert_sane_event(event)
    assert to_batch_abandoned(body).id in event.event_id or event.kind is EventKind.CONTEXT


@SETTINGS
@given(bodies(REPLY_KEYS, {"type": "gap", "last_seq": 4, "seq": 5}) | objects(REPLY_KEYS, {"stream": "S", "seq": 5}))
@example(b'{"type":"gap","last_seq":12,"seq":4}')
@example(b'{"type":"ack","seq":99999999999999999999999,"msgs":10}')
@example(b'{"stream":"a b","seq":5}')
def test_replies_parse_or_are_malformed(body):
    try:
        reply = to_reply(body)
    except MalformedInput:
        return
    if isinstance(reply, FlowGap):
        assert 0 < reply.lost <= INT64_MAX


subject_tokens = st.text(alphabet="ab.*>$FI0123456789 -_okfail", min_size=0, max_size=12)


@SETTINGS
@given(st.lists(subject_tokens, min_size=1, max_size=10).map(".".join) | st.text(max_size=120))
@example("_INBOX.x.b.10.ok.99999999999999999999999.1.$FI")
@example("_INBOX.x.b.10.ok.1.0.$FI")
def test_reply_subjects_parse_or_are_malformed(subject):
    try:
        parsed = FastReplySubject.parse(subject)
    except MalformedInput:
        return
    assert 1 <= parsed.seq <= INT64_MAX and 1 <= parsed.flow <= 65535


EVENT = {"event_id": "fi.b.gap.5", "kind": "fast_gap", "time": "2026-11-21T03:00:01.5Z", "stream": "S",
         "batch_id": "b", "seq": 5, "first_lost_seq": 4, "lost": 1, "v": 1}


@SETTINGS
@given(bodies(EVENT_KEYS, EVENT))
@example(json.dumps({**EVENT, "flow": "abc"}).encode())
@example(json.dumps({**EVENT, "seq": "abc"}).encode())
@example(json.dumps({**EVENT, "first_lost_seq": 12}).encode())
@example(json.dumps({**EVENT, "seq": 99999999999999999999999}).encode())
@example(json.dumps({**EVENT, "stream": "a b"}).encode())
def test_events_read_back_or_are_malformed(body):
    try:
        event = event_from_json(body)
    except MalformedEvent:
        return
    assert_sane_event(event)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["_INBOX.p.b.10.ok.1.0.$FI", "_INBOX.p.b.10.fail.7.1.$FI",
                                           "_INBOX.p.c.10.ok.9.3.$FI", "x.y"]),
                          bodies(REPLY_KEYS, {"type": "ack", "seq": 0, "msgs": 10})), max_size=8))
@example([("_INBOX.p.b.10.ok.1.0.$FI", b'{"type":"ack","seq":0,"msgs":0}')])  # once made an event with flow 0
def test_the_tracker_only_raises_malformed_input_and_makes_sane_events(feed):
    tracker = FastBatchTracker()
    for subject, body in feed:
        try:
            events = tracker.observe(subject, body, NOW)
        except MalformedInput:
            continue
        for event in events:
            assert_sane_event(event)


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_bodies_are_malformed_everywhere(body):
    for parse in (to_batch_abandoned, advisory_to_event, to_reply, event_from_json):
        with pytest.raises(MalformedInput):
            parse(body)


STATUS_KEYS = ["instance", "healthy", "unhealthy", "rejected", "events_written", "advisory_lag", "cpu", "loops",
               "batch_timeout", "problems"]


@SETTINGS
@given(bodies(STATUS_KEYS, {"instance": "c1", "events_written": 3}))
@example('{"batch_timeout": 1' + "0" * 400 + "}")  # an int no float holds: was an OverflowError
@example('{"batch_timeout": Infinity}')
@example('{"batch_timeout": NaN}')
@example('{"events_written": 1' + "0" * 400 + "}")
def test_collector_statuses_read_back_or_are_malformed(body):
    from console.domain.status import CollectorStatus

    try:
        status = CollectorStatus.from_json(body)
    except MalformedInput:
        return
    rejected = json.loads(body).get("rejected")
    if isinstance(rejected, dict) and len({k[:200] for k in rejected}) == len(rejected):  # no two keys cut alike
        assert status.rejected_total == sum(rejected.values())  # every count the body gave, nothing else
    assert CollectorStatus.from_json(status.to_json()) == status


CONNZ_ANSWER = {"server": {"name": "n1"}, "data": {"connections": [
    {"cid": 6, "ip": "127.0.0.1", "port": 53236, "name": "orders-writer", "lang": "python3", "version": "2.16.0",
     "authorized_user": "app", "account": "APP", "subscriptions_list": ["_INBOX.abc.*"]}]}}


@SETTINGS
@given(bodies(["server", "data", "error"], CONNZ_ANSWER)
       | st.builds(lambda c: json.dumps({**CONNZ_ANSWER, "data": {"connections": [c]}}).encode(),
                   st.dictionaries(st.sampled_from(["cid", "ip", "port", "name", "lang", "version", "account",
                                                    "authorized_user", "subscriptions_list"]), json_values, max_size=5)))
@example(json.dumps(CONNZ_ANSWER).encode())
def test_connz_answers_read_or_refuse_and_a_publisher_reads_back_from_its_event(body):
    from console.domain.publisher import MalformedPublisher, publishers_from_connz

    try:
        found = publishers_from_connz(body, "_INBOX.abc")
    except MalformedPublisher:
        return
    for publisher in found:
        assert publisher.cid is None or 0 <= publisher.cid <= INT64_MAX
        event = BatchEvent("e", EventKind.FAST_GAP, NOW, publisher=publisher)
        assert event_from_json(event.to_json()) == event
        assert "\n" not in publisher.line()


@SETTINGS
@given(st.text(max_size=200))
@example("2026-11-26T10:00:00Z")
@example("9" * 5000)
@example("2026-11-26T10:00:00\x00")
def test_a_search_time_is_a_time_none_or_refused(text):
    """The search's since/until, as the CLI and the Search page's form (or its URL) give them."""
    from console.domain.search import SearchRefused, search_time

    try:
        moment = search_time(text)
    except SearchRefused as e:
        assert len(str(e)) < 500 and text.strip()  # the text cut to 40 characters, escaped
        return
    assert moment is None if not text.strip() else isinstance(moment, datetime)
    if text == "2026-11-26T10:00:00Z":
        assert moment == datetime(2026, 11, 26, 10, tzinfo=timezone.utc)


@SETTINGS
@given(st.dictionaries(st.sampled_from(EVENT_KEYS), json_values, max_size=4))
@example({"first_lost_seq": 12})
@example({"detail": "x" * (64 * 1024)})
@example({"stream": "a b"})
@example({"stream": float("inf")})
@example({"publisher": {"name": float("nan")}})
def test_the_writers_check_refuses_what_readers_would_refuse(over):
    """The event log's writer checks an event's record as readers will read its JSON, without reading it back."""
    from console.domain.events import dump_record, refusal

    record = {**EVENT, **over}
    body = dump_record(record)
    try:
        event_from_json(body)
        readable = True
    except MalformedEvent:
        readable = False
    assert (refusal(record, len(body)) is None) == readable


def test_a_copy_with_changes_is_replaces_and_knows_its_fields():
    from dataclasses import fields, replace

    event = BatchEvent("e.1", EventKind.FAST_GAP, datetime(2026, 11, 27, tzinfo=timezone.utc), "S", "b", seq=5,
                       first_lost_seq=3, lost=2, detail="lone \ud800 surrogate")
    for field, value in (("source", "fi_tap"), ("cluster", "c1"), ("stream", None), ("inferred", True)):
        assert event.but(**{field: value}) == replace(event, **{field: value})
    copy = event.but(cluster="c2")
    assert [getattr(copy, f.name) for f in fields(BatchEvent) if f.name != "cluster"] == \
        [getattr(event, f.name) for f in fields(BatchEvent) if f.name != "cluster"] and event.cluster is None
    with pytest.raises(TypeError):
        event.but(clutser="typo")
    assert event_from_json(event.to_json()) == event  # a text orjson will not write goes by the standard library


def test_a_false_that_is_no_flag_reads_back_false():
    event = BatchEvent("e.2", EventKind.FAST_COMMITTED, datetime(2026, 11, 27, tzinfo=timezone.utc), "S", "b", eob=False)
    assert b'"eob":false' in event.to_json() and event_from_json(event.to_json()).eob is False
    assert b"inferred" not in event.to_json()  # a flag's default is not written
