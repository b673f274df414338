"""Consumer lag judged on Burrow's rules, and the consumer info parser, total over hostile replies."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from console.domain.consumer_lag import (
    ConsumerRead, MalformedConsumer, NextMessage, Trail, given_time, judge, parse_consumer, pause_end,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
WINDOW = timedelta(seconds=30)


def info(**over) -> dict:
    base = {"stream_name": "ORDERS", "name": "billing", "config": {"durable_name": "billing", "ack_policy": "explicit",
            "max_deliver": -1, "filter_subject": "orders.>"}, "delivered": {"consumer_seq": 10, "stream_seq": 10},
            "ack_floor": {"consumer_seq": 10, "stream_seq": 10}, "num_ack_pending": 0, "num_redelivered": 0,
            "num_waiting": 1, "num_pending": 5, "ts": "2026-12-01T12:00:00.123456789Z"}
    base.update(over)
    return base


def read(at: float, floor: int, pending: int, ack_pending: int = 0, paused: bool = False) -> ConsumerRead:
    parsed = parse_consumer(info(delivered={"stream_seq": floor + ack_pending}, ack_floor={"stream_seq": floor},
                                 num_pending=pending, num_ack_pending=ack_pending, paused=paused))
    return ConsumerRead(**{**parsed.__dict__, "at": T0 + timedelta(seconds=at)})


def trail(*reads: ConsumerRead) -> Trail:
    t = Trail()
    for r in reads:
        t.add(r)
    return t


def test_a_consumer_info_reads_with_the_server_s_nanoseconds_and_its_kind():
    r = parse_consumer(info())
    assert (r.stream, r.name, r.kind, r.pending, r.waiting, r.filters) == ("ORDERS", "billing", "pull", 5, 1, ("orders.>",))
    assert r.at == datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    push = parse_consumer(info(config={"durable_name": "p", "deliver_subject": "_INBOX.x", "ack_policy": "explicit"}))
    ordered = parse_consumer(info(config={"ack_policy": "none", "mem_storage": True, "deliver_subject": "_INBOX.y"}))
    assert (push.kind, ordered.kind, ordered.durable) == ("push", "ordered", False)


@pytest.mark.parametrize("hostile", [
    None, [], "x", {"config": {}}, info(name="a" * 300), info(name="bad\x01name"), info(name="a.b"),
    info(stream_name=""), info(num_pending=-1), info(num_pending=2 ** 70), info(num_pending="5"),
    info(num_pending=True), info(num_pending=1.5), info(delivered=[]), info(ts="yesterday"), info(ts=5),
    info(ts="9999-01-01T00:00:00Z"), info(config={"ack_policy": "sometimes"}), info(config=[]),
    info(priority_groups="x"), info(pause_remaining=-5), info(config={"filter_subjects": [1, 2]}),
])
def test_anything_that_is_not_a_consumer_info_is_one_typed_error(hostile):
    with pytest.raises(MalformedConsumer):
        parse_consumer(hostile)


def test_a_deeply_nested_reply_is_refused_without_a_recursion_error():
    from console.broker.consumers import next_message_of

    with pytest.raises(MalformedConsumer):
        next_message_of(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(MalformedConsumer):
        next_message_of(json.dumps({"message": {"seq": 1, "time": "then"}}).encode())
    assert next_message_of(b'{"error":{"code":404,"err_code":10037,"description":"no message found"}}') is None


def test_a_consumer_of_another_stream_in_a_stream_s_list_is_refused():
    with pytest.raises(MalformedConsumer):
        parse_consumer(info(stream_name="PAYMENTS"), "ORDERS")


def test_a_position_unmoved_over_the_window_while_messages_wait_is_a_stall():
    j = judge(trail(read(0, 10, 5), read(10, 10, 5), read(20, 10, 6), read(31, 10, 6)), WINDOW)
    assert j.state == "stalled" and "stayed at 10" in j.why
    # not yet over a whole window: no verdict of a stall
    assert judge(trail(read(0, 10, 5), read(10, 10, 5)), WINDOW).state == "ok"


def test_a_reader_holding_messages_it_never_acks_is_a_stall():
    j = judge(trail(read(0, 10, 0, ack_pending=3), read(15, 10, 0, ack_pending=3), read(31, 10, 0, ack_pending=3)),
              WINDOW)
    assert j.state == "stalled"


def test_a_burst_being_read_is_not_a_stall_but_it_is_falling_behind():
    # ten times the usual rate for 30 s: the position moves at every read while what waits grows
    reads = [read(t, 10 + 100 * i, 50 + 900 * i) for i, t in enumerate(range(0, 40, 5))]
    j = judge(trail(*reads), WINDOW)
    assert j.state == "lagging" and j.trend == "falling_behind" and j.catch_up_s is None


def test_a_consumer_catching_up_says_when_at_the_current_rate():
    j = judge(trail(read(0, 0, 1000), read(10, 400, 600), read(20, 800, 200)), WINDOW)
    assert j.state == "ok" and j.trend == "catching_up"
    assert j.catch_up_s == pytest.approx(200 / 40)


def test_paused_caught_up_and_one_read_say_themselves():
    assert judge(trail(read(0, 10, 5, paused=True)), WINDOW).state == "paused"
    assert judge(trail(read(0, 10, 0)), WINDOW).state == "caught_up"
    one = judge(trail(read(0, 10, 5)), WINDOW)
    assert (one.state, one.trend) == ("ok", None) and "no trend" in one.why


def test_lag_in_seconds_is_the_oldest_undelivered_message_s_age_by_the_server_s_clock():
    r = read(0, 10, 5)
    j = judge(trail(r), WINDOW, NextMessage(11, T0 - timedelta(seconds=42), "b1", 3))
    assert j.lag_seconds == pytest.approx(42) and (j.inside_batch, j.read_of_batch) == ("b1", 2)
    assert judge(trail(read(0, 10, 0)), WINDOW).lag_seconds == 0.0
    assert judge(trail(r), WINDOW, NextMessage(11, T0, "b1", 1)).inside_batch is None  # at a batch's first


def test_a_reset_back_starts_a_new_trail_and_a_read_again_is_not_a_second_read():
    t = trail(read(0, 100, 5), read(10, 100, 5))
    t.add(read(10, 100, 5))
    assert len(t.reads) == 2
    t.add(read(20, 3, 200))
    assert len(t.reads) == 1


@pytest.mark.parametrize("text", ["", "soon", "x" * 100, "2026-12-01T00:00:00\n", 5, None, "0001-01-01T00:00:00Z"])
def test_a_time_a_person_gives_is_refused_with_its_flag(text):
    with pytest.raises(ValueError, match="--until"):
        given_time(text, "--until")


def test_a_time_without_a_zone_is_utc_and_a_pause_must_end_within_a_year():
    assert given_time("2026-12-01T12:00:00", "--until") == T0
    with pytest.raises(ValueError):
        pause_end(T0 - timedelta(seconds=1), T0)
    with pytest.raises(ValueError):
        pause_end(T0 + timedelta(days=400), T0)


def test_the_consumer_checks_judge_only_over_a_whole_window_and_say_so_otherwise():
    from console.domain.checks import Facts, evaluate

    stalled = judge(trail(read(0, 10, 5), read(15, 10, 5), read(31, 10, 5)), WINDOW)
    paused = judge(trail(read(0, 10, 5, paused=True)), WINDOW)
    report = evaluate(Facts(consumers=(stalled, paused), consumers_over_window=(stalled,)))
    assert {(f.code, f.stream) for f in report.findings} == {("BATCH_040", "ORDERS"), ("BATCH_042", "ORDERS")}
    once = evaluate(Facts(consumers=(paused,), unread_why={"consumers_over_window": "one read only"}))
    assert ("BATCH_040", "one read only") in once.unchecked and "BATCH_042" in {f.code for f in once.findings}


def test_a_rule_on_consumer_lag_fires_per_consumer_after_its_grace_and_resolves():
    from console.domain.alert_rules import parse_rules
    from console.domain.alerting import Evaluator

    [rule] = parse_rules('[[rule]]\nname = "behind"\nwhen = "consumer_lag_seconds"\nat_least = 60\nfor = "30s"\n'
                         'streams = ["ORD*"]\nreasons = ["bill*"]\n')
    evaluator = Evaluator([rule])
    behind = judge(trail(read(0, 10, 5)), WINDOW, NextMessage(11, T0 - timedelta(seconds=90)))
    evaluator.set_consumers([behind])
    assert evaluator.evaluate(T0) == []  # within its grace
    [fired] = evaluator.evaluate(T0 + timedelta(seconds=31))
    assert (fired.status, fired.stream, fired.count) == ("firing", "ORDERS/billing", 90)
    evaluator.set_consumers([judge(trail(read(40, 20, 0)), WINDOW)])
    [resolved] = evaluator.evaluate(T0 + timedelta(seconds=45))
    assert resolved.status == "resolved"


def test_lag_records_hold_every_consumer_within_an_event_s_size_and_read_back():
    from console.domain.consumer_lag import RECORD_BYTES, lag_records
    from console.domain.events import EventKind, event_from_json

    many = [judge(trail(read(0, 10, i)), WINDOW) for i in range(2_000)]
    events = lag_records(many, "default", T0)
    assert len(events) > 1 and all(len(e.detail) <= RECORD_BYTES for e in events)
    rows = [row for e in events for row in json.loads(e.detail)]
    assert len(rows) == 2_000 and rows[5] == {"s": "ORDERS", "c": "billing", "p": 5, "a": 0, "l": None, "st": "ok"}
    again = event_from_json(events[0].to_json())
    assert again.kind is EventKind.CONSUMER_LAG and again.detail == events[0].detail
    assert lag_records([], "default", T0) == []
