"""The audit trail's records and their chain (console.domain.audit), without a server."""

import json
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings, strategies as st

from console.domain.audit import (GENESIS, Actor, AuditRecord, MalformedAudit, Stored, chain_hash, check,
                                  to_record)
from console.domain.signing import SIGNATURE, signature

KEY = b"k3y-for-the-audit-tests"
AT = datetime(2026, 11, 25, 8, 0, tzinfo=timezone.utc)


def chain(n: int) -> list[Stored]:
    stored, previous = [], GENESIS
    for i in range(n):
        body = AuditRecord(AT, Actor("alice", "127.0.0.1", "UA"), "stream.edit", f"S{i}", "accepted",
                           diff={"allow_atomic": [False, True]}, previous=previous).body()
        stored.append(Stored(i + 1, body, {SIGNATURE: signature(KEY, body)}))
        previous = chain_hash(body)
    return stored


def test_a_written_record_reads_back_as_itself():
    record = AuditRecord(AT, Actor("alice", "10.0.0.1", "Mozilla"), "message.term", "ORDERS/worker seq 7",
                         "refused: server", "400 [10071] wrong last sequence", {"x": [1, None]})
    assert to_record(record.body()) == record
    assert record.stream == "ORDERS"


def test_an_intact_chain_has_no_breaks():
    checked = check(chain(5), KEY, 1, 5)
    assert checked.intact and [seq for seq, _ in checked.records] == [1, 2, 3, 4, 5]


def test_a_removed_record_is_a_hole_and_a_break_in_the_chain():
    stored = chain(5)
    del stored[2]
    breaks = check(stored, KEY, 1, 5).breaks
    assert (3, "records 3..3 were removed") in breaks
    assert (4, "does not follow the record before it") in breaks


def test_records_aged_out_at_the_trails_limit_are_said_and_records_erased_past_it_break_the_chain():
    from dataclasses import replace

    from console.domain.audit import KEPT

    erased = check([replace(s, seq=s.seq + 10) for s in chain(5)], KEY, 11, 15)  # a trail of 15 keeps them all
    assert not erased.intact and erased.aged_out == 0  # so 1..10 were erased, not aged out
    at_limit = check([replace(s, seq=s.seq + KEPT + 5) for s in chain(5)], KEY, KEPT + 6, KEPT + 10,
                     read_from=KEPT + 6)
    assert at_limit.aged_out == 10 and "10 older record(s) aged out of the trail's limit" in at_limit.aged()
    assert check(chain(5), KEY, 1, 5).aged() == ""


def test_the_newest_record_removed_is_found_from_the_streams_last_sequence():
    assert check(chain(5)[:4], KEY, 1, 5).breaks == [(5, "records 5..5 were removed")]


def test_an_altered_or_forged_record_fails_its_signature():
    stored = chain(3)
    body = stored[1].body.replace(b"alice", b"mallory")
    stored[1] = Stored(2, body, stored[1].headers)
    stored.append(Stored(4, b'{"forged": true}', {SIGNATURE: "0" * 64}))
    breaks = dict(check(stored, KEY, 1, 4).breaks)
    assert "altered" in breaks[2] and "altered" in breaks[4]


@pytest.mark.parametrize("body, why", [
    (b"[" * 10_000, "nested"),
    (b"x" * 20_000, "larger"),
    (json.dumps({"time": "2026-11-25T08:00:00+00:00", "actor": "alice"}).encode(), "actor"),
    (b'{"time": ' + b"9" * 5000 + b"}", "not JSON"),  # past the digits Python converts
    (json.dumps({"time": "yesterday", "actor": {}, "outcome": "accepted", "previous": GENESIS}).encode(), "time"),
    (json.dumps({"time": "2026-11-25T08:00:00+00:00", "actor": {}, "outcome": "pwned", "previous": GENESIS}).encode(),
     "outcome"),
    (json.dumps({"time": "2026-11-25T08:00:00+00:00", "actor": {"user": 7}}).encode(), "actor"),
    (json.dumps({"time": "2026-11-25T08:00:00+00:00", "actor": {}, "outcome": "accepted", "previous": "0"}).encode(),
     "hash"),
])
def test_a_malformed_record_is_one_typed_error(body, why):
    with pytest.raises(MalformedAudit, match=why):
        to_record(body)


def test_control_characters_and_long_texts_are_bounded_when_read():
    body = json.dumps({"time": "2026-11-25T08:00:00+00:00", "actor": {"user": "a\x1b[31mb", "agent": "x" * 5000},
                       "action": "stream.edit", "target": "S", "outcome": "accepted", "previous": GENESIS}).encode()
    record = to_record(body)
    assert record.actor.user == "a?[31mb" and len(record.actor.agent) == 256


@settings(deadline=None)
@given(st.binary(max_size=2000) | st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                                               lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner))
       .map(lambda v: json.dumps(v).encode()))
def test_any_bytes_make_a_record_or_one_typed_error(data):
    try:
        to_record(data)
    except MalformedAudit:
        pass


def test_several_systems_trails_read_as_one_keep_each_records_system_and_name_each_break():
    from datetime import timedelta

    from console.domain.audit import Checked
    from console.queries.audit import audit_frame
    from console.domain.display import Clock

    def record(minutes: int, target: str) -> AuditRecord:
        return AuditRecord(AT + timedelta(minutes=minutes), Actor("alice", "127.0.0.1", "UA"), "stream.edit", target,
                           "accepted")

    eu = Checked([(1, record(1, "A")), (2, record(3, "B"))], [])
    us = Checked([(1, record(2, "C"))], [(5, "erased")], unsafe="no deny_delete")
    merged = Checked.across({"eu": eu, "us": us})
    assert [(seq, r.target, s) for (seq, r), s in zip(merged.records, merged.systems)] == \
        [(1, "A", "eu"), (1, "C", "us"), (2, "B", "eu")]
    assert merged.breaks == [(5, "system us: erased")] and not merged.intact and merged.unsafe == "us: no deny_delete"
    frame = audit_frame(merged, Clock())
    assert list(frame.columns[:2]) == ["record", "system"] and list(frame["system"]) == ["eu", "us", "eu"]
    assert "system" not in audit_frame(eu, Clock()).columns


def test_an_attempt_with_no_outcome_yet_is_said_as_running_or_ended_never_as_a_failure():
    """The continuous canary writes canary.run's outcome when it stops: while it ran the page said 'attempted:
    no outcome recorded', which read as a failure."""
    from console.domain.audit import Checked, Outcome
    from console.queries.audit import audit_frame
    from console.ui.formatting import Clock

    NO_OUTCOME_YET = Outcome.NO_OUTCOME_YET

    started = AuditRecord(AT, Actor("canary", "", ""), "canary.run", "every node", "attempted")
    done = AuditRecord(AT, Actor("alice", "", ""), "stream.edit", "S", "attempted")
    applied = AuditRecord(AT, Actor("alice", "", ""), "stream.edit", "S", "accepted")
    frame = audit_frame(Checked([(1, started), (2, done), (3, applied)], []), Clock())
    assert frame["outcome"].tolist() == ["accepted", NO_OUTCOME_YET]
    assert "running" in NO_OUTCOME_YET and "no outcome recorded" not in NO_OUTCOME_YET
