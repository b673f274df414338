from datetime import datetime, timezone

import pytest

from console.domain.server_versions import ServerRelease
from console.domain.advisories import AbandonReason, BatchAbandoned, MalformedAdvisory, parse_timestamp, to_batch_abandoned


def test_every_captured_abandonment_parses_with_a_known_reason(vectors):
    parsed = [to_batch_abandoned(r["body"]) for r in vectors.records("advisories")]
    expected = set(AbandonReason)
    if not ServerRelease(vectors.version, None).has("unsupported_advisory"):  # 10185 reaches the publisher only
        expected.discard(AbandonReason.UNSUPPORTED)
    assert {a.reason for a in parsed} == expected


def test_only_the_system_accounts_copy_names_the_account(vectors):
    for record in vectors.records("advisories"):
        adv = to_batch_abandoned(record["body"])
        assert adv.account == ("APP" if record["account"] == "SYS" else None), record["scenario"]


def test_account_copy_has_no_account():
    adv = to_batch_abandoned(
        '{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"gLfOmcoOv5EsDe2LPiUdMI",'
        '"timestamp":"2026-11-21T02:47:57.346469731Z","stream":"ADV","batch":"abandon-me","reason":"timeout"}'
    )
    assert adv == BatchAbandoned(
        id="gLfOmcoOv5EsDe2LPiUdMI",
        timestamp=datetime(2026, 11, 21, 2, 47, 57, 346469, tzinfo=timezone.utc),
        stream="ADV",
        batch="abandon-me",
        reason=AbandonReason.TIMEOUT,
    )


def test_system_copy_carries_account_and_domain_and_the_same_id():
    body = (
        '{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"oNejGHgrbLMnVKbAl1S1nK",'
        '"timestamp":"2026-11-21T02:50:14.804678435Z","account":"APP","stream":"S1","domain":"hub",'
        '"batch":"sys-timeout","reason":"timeout"}'
    )
    adv = to_batch_abandoned(body)
    assert (adv.id, adv.account, adv.domain, adv.stream) == ("oNejGHgrbLMnVKbAl1S1nK", "APP", "hub", "S1")


def test_timestamps_keep_microseconds_of_go_nanoseconds():
    assert parse_timestamp("2026-11-21T02:48:23.8934421Z").microsecond == 893442
    assert parse_timestamp("2026-11-21T02:48:23Z").second == 23


@pytest.mark.parametrize(
    "body, reason",
    [
        ("{", "not JSON"),
        ('{"type":"io.nats.jetstream.advisory.v1.stream_action"}', "type is"),
        ('{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"x"}', "'timestamp'"),
        (
            '{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"x","timestamp":"2026-11-21T02:48:23Z",'
            '"stream":"S","batch":"b","reason":"bo\\u0007red"}',
            "'reason'",
        ),
    ],
)
def test_malformed_advisories_say_why(body, reason):
    with pytest.raises(MalformedAdvisory) as info:
        to_batch_abandoned(body)
    assert reason in info.value.reason


def test_a_reason_this_console_does_not_know_is_a_loss_as_itself():
    body = ('{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"x","timestamp":"2026-11-21T02:48:23Z",'
            '"stream":"S","batch":"b","reason":"brand_new"}')
    assert to_batch_abandoned(body).reason == "brand_new"
    for bad in ('""', '"' + "x" * 65 + '"', "17", "null", '["timeout"]'):
        with pytest.raises(MalformedAdvisory):
            to_batch_abandoned(body.replace('"brand_new"', bad))
