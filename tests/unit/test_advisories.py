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


RESCUE = (b'{"type":"io.nats.jetstream.advisory.v1.meta_rescue","id":"L5JKrkamz8vntF48HU0OYg",'
          b'"timestamp":"2026-12-02T13:28:39.431074403Z","server":"n1","server_id":"NCOTVLSG7Q",'
          b'"prev_quorum":2,"new_quorum":1,"cluster":"batch-console"}')  # as nats-server 2.15.1 sent it


def test_the_meta_rescue_advisory_is_context_of_no_stream_and_live_shows_the_system_accounts_alone():
    from dataclasses import replace

    from console.domain.advisory_events import advisory_to_event
    from console.domain.events import ACCOUNT_ADVISORY, SYSTEM_ADVISORY, EventKind
    from console.domain.live_model import LiveModel
    from console.ui.live import notices_html

    event = advisory_to_event(RESCUE)
    assert (event.kind, event.stream, event.reason, event.cluster) == (EventKind.CONTEXT, None, "meta_rescue",
                                                                       "batch-console")
    assert event.detail == "meta_rescue:n1 lowered the meta group's quorum from 2 to 1"
    model = LiveModel()
    model.apply(replace(event, source=ACCOUNT_ADVISORY))  # any client of the account can publish that subject
    assert "rescued" not in notices_html(model)
    model.apply(replace(event, event_id="adv.other", source=SYSTEM_ADVISORY))
    assert "the meta group was rescued" in notices_html(model) and "from 2 to 1" in notices_html(model)


@pytest.mark.parametrize("change", [b'"prev_quorum":2', b'"server":"n1"', b'"id":"L5JKrkamz8vntF48HU0OYg"'])
def test_a_broken_meta_rescue_advisory_is_malformed(change):
    from console.domain.advisories import MalformedAdvisory
    from console.domain.advisory_events import advisory_to_event

    broken = RESCUE.replace(change, change.split(b":")[0] + b':"x\\u001b"' if b"quorum" not in change
                            else change.split(b":")[0] + b":-5")
    with pytest.raises(MalformedAdvisory):
        advisory_to_event(broken)
