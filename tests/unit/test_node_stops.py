"""A server's stop notice read totally (only the system account hears it, and still), and the check
BATCH_034: a stop outside a console restart after which batches were lost; never a quiet stop, never
one the console's own restart covered."""

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from console.domain.checks import Facts, evaluate
from console.domain.events import ACCOUNT_ADVISORY, BatchEvent, EventKind, MalformedEvent
from console.domain.maintenance_record import MaintenanceRecord
from console.domain.node_stops import node_stopped, stops_outside

SID = "NDDYTDVYAU66XXD42EB2DHNSEF53AKEP3D6GZ22CPHMD7DTPDGAZSZ43"
# as nats-server 2.15.1 sent it on SIGTERM (the time moved to the test's)
NOTICE = {"name": "n2", "host": "127.0.0.1", "id": SID, "cluster": "batch-console", "ver": "2.15.1",
          "jetstream": True, "flags": 7, "seq": 20, "time": "2026-12-02T12:24:37.647684244Z"}


def _notice(how: str = "SHUTDOWN", **changes) -> tuple[str, bytes]:
    return f"$SYS.SERVER.{SID}.{how}", json.dumps({**NOTICE, **changes}).encode()


def test_a_stop_notice_as_the_server_sends_it():
    event = node_stopped(*_notice("LAMEDUCK"))
    assert (event.kind, event.reason, event.detail) == (EventKind.NODE_STOPPED, "lame_duck", "n2")
    assert event.time == datetime(2026, 12, 2, 12, 24, 37, 647684, tzinfo=timezone.utc)
    assert node_stopped(*_notice()).event_id == f"node-stopped.{SID}.shutdown"


@pytest.mark.parametrize("subject,body", [
    (f"$SYS.SERVER.{SID}.STATSZ", NOTICE), ("$SYS.SERVER.*.SHUTDOWN", NOTICE), (f"$SYS.SERVER.{SID}.SHUTDOWN.x", NOTICE),
    ("$SYS.SERVER.a.b.SHUTDOWN", NOTICE), (f"$SYS.SERVER.{'A' * 65}.SHUTDOWN", {**NOTICE, "id": "A" * 65}),
    (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "id": "OTHER"}), (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "name": ""}),
    (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "name": 7}), (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "name": "n\x1b2"}),
    (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "name": "n" * 300}),
    (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "time": "later"}), (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "time": 5}),
    (f"$SYS.SERVER.{SID}.SHUTDOWN", {**NOTICE, "time": "99999-01-01T00:00:00Z"}),
])
def test_a_notice_that_is_not_one_is_one_typed_error(subject, body):
    with pytest.raises(MalformedEvent):
        node_stopped(subject, json.dumps(body).encode())


@pytest.mark.parametrize("data", [b"", b"[]", b"{", b"1e99999", b'{"a":' * 5000, b"x" * 20_000, b"\xff\xfe"])
def test_a_body_that_is_not_json_is_one_typed_error(data):
    with pytest.raises(MalformedEvent):
        node_stopped(f"$SYS.SERVER.{SID}.SHUTDOWN", data)


def _stop(at: datetime, how: str = "LAMEDUCK", node: str = "n2") -> BatchEvent:
    return node_stopped(*_notice(how, name=node, time=at.isoformat().replace("+00:00", "Z")))


def _loss(at: datetime, batch: str) -> BatchEvent:
    return BatchEvent(f"lost.{batch}", EventKind.ATOMIC_LOST, at, "ORDERS", batch, reason="leader_change")


T = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)


def test_a_stop_that_cost_batches_outside_a_maintenance_is_found_once_for_its_lame_duck_and_shutdown():
    events = [_loss(T - timedelta(minutes=5), "earlier"), _stop(T), _loss(T + timedelta(seconds=1), "a"),
              _loss(T + timedelta(seconds=3), "b"), _stop(T + timedelta(seconds=30), "SHUTDOWN"),
              _loss(T + timedelta(seconds=60), "much-later")]
    [stop] = stops_outside(events, batch_timeout=10)
    assert (stop.node, stop.how, stop.lost) == ("n2", "lame_duck", 2)
    assert "n2 entered lame duck mode at 2026-12-02 10:00:00Z outside a console maintenance: 2 batch(es)" in stop.evidence()


def test_a_quiet_stop_a_console_restart_and_a_forged_copy_are_no_finding():
    assert stops_outside([_stop(T)], 10) == ()  # nothing lost: what maintenance is
    record = replace(MaintenanceRecord.begin("restart", ["n2"], "alice"), start=T - timedelta(seconds=5))
    covered = [record.event(), _stop(T), _loss(T + timedelta(seconds=1), "a"),
               record.ended(T + timedelta(seconds=40), 1, 1, "restarted", end=T + timedelta(seconds=20)).event()]
    assert stops_outside(covered, 10) == ()
    drained_only = [replace(MaintenanceRecord.begin("drain", ["n2"], "a"), start=T - timedelta(seconds=5)).event(),
                    _stop(T), _loss(T + timedelta(seconds=1), "a")]  # a drain stops no server: not covered
    assert len(stops_outside(drained_only, 10)) == 1
    forged = [replace(_stop(T), source=ACCOUNT_ADVISORY), _loss(T + timedelta(seconds=1), "a")]
    assert stops_outside(forged, 10) == ()  # only the system account's notice is a stop


def test_batch_034_is_unchecked_without_the_system_account_and_a_finding_with_it():
    unchecked = dict(evaluate(Facts()).unchecked)
    assert "system account" in unchecked["BATCH_034"]
    report = evaluate(Facts(stops_outside=stops_outside([_stop(T), _loss(T, "a")], 10)))
    [finding] = [f for f in report.findings if f.code == "BATCH_034"]
    assert finding.severity == "warning" and "maintain restart" in finding.remedy and finding.stream is None
    assert "BATCH_034" in evaluate(Facts(stops_outside=())).checked
    assert not [f for f in evaluate(Facts(stops_outside=())).findings if f.code == "BATCH_034"]
