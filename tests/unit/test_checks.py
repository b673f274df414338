"""The catalogue of batch health checks over facts made by hand: each check fires on what it is about
and stays quiet on the same facts without it; thresholds come from a stream's metadata, then the
settings, then the defaults; what could not be read is unchecked, never ok."""

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from console.domain.batch_limits import BatchLimits
from console.domain.budgets import BudgetStatus, Counts
from console.domain.canary import CanaryResult
from console.domain.durability import ServerSync
from console.domain.node_stops import StopOutside
from console.domain.checks import (CHECKS, Facts, MalformedListing, RecentEvents, StreamFacts, StreamPage,
                                   ThresholdError, WindowCounts, evaluate, parse_threshold, window_counts)
from console.domain.events import BatchEvent, EventKind
from console.domain.server_versions import ServerRelease
from console.domain.stream_settings import StreamBatchSettings

NEW, OLD = ServerRelease("2.15.1", 5), ServerRelease("2.12.8", 3)
LIMITS = BatchLimits.from_varz({"version": "2.15.1"})
QUIET = Facts(server=NEW, limits=LIMITS, streams=(StreamFacts(StreamBatchSettings("S", replicas=3)),), counts={},
              collector_age_s=5, collector_healthy=True, fast_paths_off=(), advisories_durable=True, system_account=True,
              event_key_exposed="", nonconforming={}, budgets=(),
              canaries=(CanaryResult("default", "n1", "atomic", 2.0, 4.0, 0, 10),), stops_outside=(),
              syncs=(ServerSync("n1", True, None),), consumers=(), consumers_over_window=())


def consumer_judged(*reads: tuple[int, int, int, int], paused: bool = False):
    """A consumer of S judged over reads of (second, ack floor, pending, redelivered), 30 s window."""
    from console.domain.consumer_lag import Trail, judge, parse_consumer

    trail = Trail()
    for second, floor, pending, redelivered in reads:
        trail.add(parse_consumer({"stream_name": "S", "name": "c", "config": {"durable_name": "c", "ack_policy": "explicit"},
                                  "delivered": {"stream_seq": floor}, "ack_floor": {"stream_seq": floor},
                                  "num_pending": pending, "num_redelivered": redelivered, "paused": paused,
                                  "ts": f"2026-12-01T12:00:{second:02d}Z"}))
    return judge(trail, timedelta(seconds=30))


def stream(duplicate_window: float = 120.0, metadata=None, **settings) -> tuple[StreamFacts, ...]:
    return (StreamFacts(StreamBatchSettings("S", **{"replicas": 3, **settings}), duplicate_window, metadata or {}),)


FIRES = {  # code -> the quiet facts changed so that it fires (on stream S where it is about a stream)
    "BATCH_001": dict(server=OLD, streams=stream(allow_batched=True)),
    "BATCH_002": dict(streams=stream(allow_atomic=True, is_mirror=True)),
    "BATCH_003": dict(streams=stream(allow_batched=True, sources=2)),
    "BATCH_004": dict(streams=stream(allow_atomic=True, replicas=1, retention="interest", consumers=0)),
    "BATCH_005": dict(streams=stream(duplicate_window=2.0, allow_atomic=True)),
    "BATCH_006": dict(counts={"S": WindowCounts(abandoned=1, abandoned_timeout=1)}),
    "BATCH_007": dict(counts={"S": WindowCounts(open_fast=900)}),
    "BATCH_008": dict(counts={"S": WindowCounts(rejected=2)}),
    "BATCH_009": dict(counts={"S": WindowCounts(abandoned=3)}),
    "BATCH_010": dict(counts={"S": WindowCounts(lost_messages=5)}),
    "BATCH_011": dict(counts={"S": WindowCounts(leader_change=1)}),
    "BATCH_020": dict(server=OLD),
    "BATCH_021": dict(advisories_durable=False),
    "BATCH_022": dict(system_account=False),
    "BATCH_023": dict(collector_age_s=600),
    "BATCH_024": dict(event_key_exposed="readable by others"),
    "BATCH_027": dict(fast_paths_off=("parser: nats-py's parser is not 2.16's",)),
    "BATCH_030": dict(nonconforming={"orbit.go 0.3": "FAST_007 (pings before the batch timeout)"}),
    "BATCH_031": dict(budgets=(BudgetStatus("orders", "messages", 1e-5, timedelta(days=28), Counts(30, 1_000_000),
                                            {}, datetime(2026, 11, 27, tzinfo=timezone.utc)),)),
    "BATCH_032": dict(canaries=(CanaryResult("default", "n2", "fast", 3.0, None, 10, 10, "timeout"),)),
    "BATCH_033": dict(canaries=(CanaryResult("default", "n2", "atomic", 3.0, None, 10, 10, "10199 allow_atomic off",
                                             tampered="stream BATCH_CONSOLE_CANARY_N2 changed: allow_atomic=False"),)),
    "BATCH_026": dict(streams=(*stream(allow_atomic=True), StreamFacts(StreamBatchSettings(
        "S_COPY", is_mirror=True, copies_of=("S",), consumers=1)))),
    "BATCH_025": dict(streams=stream(allow_atomic=True), syncs=(ServerSync("n1", False, 120.0),)),
    "BATCH_034": dict(stops_outside=(StopOutside("n2", "lame_duck", datetime(2026, 11, 27, tzinfo=timezone.utc), 3),)),
    "BATCH_040": dict(consumers_over_window=(consumer_judged((0, 5, 9, 0), (31, 5, 9, 0)),)),
    "BATCH_041": dict(consumers_over_window=(consumer_judged((0, 5, 0, 1), (15, 5, 0, 1), (31, 5, 0, 1)),)),
    "BATCH_042": dict(consumers=(consumer_judged((0, 5, 9, 0), paused=True),)),
}
# A fact that fires one check may be the premise of another (an old server also has known defects)
ALSO = {"BATCH_001": {"BATCH_020"}, "BATCH_006": {"BATCH_009"}}


def codes(report):
    return {f.code for f in report.findings}


def test_the_catalogue_has_at_least_fifteen_checks_each_with_a_title_a_severity_and_a_remedy():
    assert len(CHECKS) >= 15 and set(FIRES) == set(CHECKS)
    for check in CHECKS.values():
        assert check.title and check.remedy and check.severity in ("info", "warning", "critical")


def test_quiet_facts_fire_nothing_and_every_check_ran():
    report = evaluate(QUIET)
    assert report.findings == () and report.unchecked == () and report.worst == "ok"
    assert set(report.checked) == set(CHECKS)


@pytest.mark.parametrize("code", sorted(FIRES))
def test_each_check_fires_on_what_it_is_about_and_only_it(code):
    report = evaluate(replace(QUIET, **FIRES[code]))
    assert codes(report) == {code} | ALSO.get(code, set())
    finding = next(f for f in report.findings if f.code == code)  # a release may have several defects
    assert finding.evidence and finding.remedy == CHECKS[code].remedy


def test_what_was_not_read_is_unchecked_never_ok():
    report = evaluate(replace(QUIET, counts=None, system_account=None))
    unchecked = {code for code, _ in report.unchecked}
    assert unchecked == {"BATCH_006", "BATCH_007", "BATCH_008", "BATCH_009", "BATCH_010", "BATCH_011", "BATCH_022"}
    assert not unchecked & set(report.checked)


def test_a_streams_metadata_wins_over_the_settings_which_win_over_the_default():
    facts = replace(QUIET, streams=stream(metadata={"batch_console.check.BATCH_009.warning_at": "5"}),
                    counts={"S": WindowCounts(abandoned=3), "T": WindowCounts(abandoned=3)})
    assert {f.stream for f in evaluate(facts).findings} == {"T"}  # S's own threshold is 5
    assert evaluate(facts, {("BATCH_009", "warning_at"): 4}).findings == ()
    hostile = replace(facts, streams=stream(metadata={"batch_console.check.BATCH_009.warning_at": "lots"}))
    assert {f.stream for f in evaluate(hostile).findings} == {"S", "T"}  # not a number: the default


def test_a_rate_is_graded_by_its_thresholds():
    facts = replace(QUIET, counts={"S": WindowCounts(abandoned=12)})
    assert [f.severity for f in evaluate(facts).findings] == ["critical"]
    assert evaluate(facts).worst == "critical"


def test_filters_by_code_and_stream():
    facts = replace(QUIET, counts={"S": WindowCounts(abandoned=1), "T": WindowCounts(rejected=1)},
                    system_account=False)
    assert codes(evaluate(facts, codes=["BATCH_008"])) == {"BATCH_008"}
    assert {(f.code, f.stream) for f in evaluate(facts, stream="S").findings} == {("BATCH_009", "S")}


@pytest.mark.parametrize("text", ["BATCH_009.warning_at", "BATCH_999.x=1", "BATCH_009.nope=1", "BATCH_009.warning_at=x",
                                  "BATCH_009.warning_at=-1", "BATCH_009.warning_at=1e99", "\x1b[31m=1", "A" * 5000])
def test_a_threshold_that_is_not_of_the_catalogue_is_refused(text):
    with pytest.raises(ThresholdError) as refused:
        parse_threshold(text)
    assert "\x1b" not in str(refused.value) and len(str(refused.value)) < 200


def test_the_window_counts_a_gap_by_the_stream_its_batch_names_later():
    t = datetime(2026, 11, 25, tzinfo=timezone.utc)
    events = [BatchEvent("1", EventKind.FAST_STARTED, t, None, "b1"), BatchEvent("2", EventKind.FAST_GAP, t, None, "b1", lost=3),
              BatchEvent("3", EventKind.FAST_COMMITTED, t, "S", "b1"), BatchEvent("4", EventKind.FAST_STARTED, t, "S", "b2"),
              BatchEvent("5", EventKind.ATOMIC_ABANDONED, t, "A", "a1", reason="timeout"),
              BatchEvent("6", EventKind.FAST_LOST, t, "S", "b3", reason="leader_change"),
              BatchEvent("7", EventKind.ATOMIC_REJECTED, t, "A", "a2")]
    events.append(BatchEvent("8", EventKind.FAST_STARTED, t, None, "b4"))  # no reply has named its stream yet
    assert window_counts(events) == {"S": WindowCounts(lost_messages=3, leader_change=1, open_fast=1),
                                     "": WindowCounts(open_fast=1),
                                     "A": WindowCounts(abandoned=1, abandoned_timeout=1, rejected=1)}



def test_a_check_about_a_loss_an_alert_rule_covers_says_the_rules_remedy():
    facts = replace(QUIET, counts={"S": WindowCounts(abandoned=1, abandoned_timeout=1)})
    shipped = {("lost_batches", "timeout"): "the shipped rule's words"}
    remedies = {f.code: f.remedy for f in evaluate(facts, remedies=shipped).findings}
    assert remedies == {"BATCH_006": "the shipped rule's words", "BATCH_009": CHECKS["BATCH_009"].remedy}


def test_open_fast_batches_near_the_servers_limit_across_streams():
    limits = BatchLimits.from_varz({"version": "2.15.1", "jetstream": {"limits": {"max_batch_inflight_total": 100}}})
    facts = replace(QUIET, limits=limits, counts={f"S{i}": WindowCounts(open_fast=30) for i in range(3)})
    [found] = evaluate(facts, codes=["BATCH_007"]).findings  # 30 a stream: each far under the stream's limit
    assert (found.stream, found.evidence) == (None, "90 fast batches open of the 100 the server may have")


def test_a_stream_list_page_is_read_totally():
    page = StreamPage.parse(json.dumps({"total": 3, "streams": [
        {"config": {"name": "A", "allow_atomic": True, "duplicate_window": 2_000_000_000,
                    "metadata": {"batch_console.check.BATCH_009.warning_at": "5"}}, "state": {"consumer_count": 1}},
        {"config": {"nope": 1}}, "garbage"], "offline": {"F": "unsupported - config error"}}).encode())
    assert [(s.settings.name, s.settings.consumers, s.duplicate_window) for s in page.streams] == [("A", 1, 2.0)]
    assert page.offline == {"F": "unsupported - config error"} and page.total == 3


@pytest.mark.parametrize("data", [b"[]", b"{", b'{"total": "3", "streams": []}', b'{"total": 1}', b"[" * 100_000,
                                  b'{"error": {"code": 503, "description": "no leader"}}', b"x" * (17 * 1024 * 1024)])
def test_a_reply_that_is_not_a_stream_list_is_refused_with_one_error(data):
    with pytest.raises(MalformedListing):
        StreamPage.parse(data)


def test_a_stream_a_downgraded_server_holds_offline_for_a_batch_flag_is_critical():
    facts = replace(QUIET, server=OLD, offline={"F": 'unsupported - config error: unknown field "allow_batched"',
                                                "G": "unsupported - something else"})
    found = [(f.code, f.stream) for f in evaluate(facts, codes=["BATCH_001"]).findings]
    assert found == [("BATCH_001", "F")]


def test_the_followers_window_keeps_only_what_the_checks_count_and_only_for_the_window():
    from datetime import timedelta

    recent = RecentEvents(keep_for_s=600)
    t = datetime(2026, 11, 25, 12, tzinfo=timezone.utc)
    recent.add(BatchEvent("old", EventKind.ATOMIC_ABANDONED, t - timedelta(minutes=11), "S", "a0"))
    recent.add(BatchEvent("new", EventKind.ATOMIC_ABANDONED, t - timedelta(minutes=1), "S", "a1"))
    recent.add(BatchEvent("p", EventKind.FAST_PROGRESS, t, "S", "b1"))  # the most numerous: never kept
    assert [e.event_id for e in recent.window(t)] == ["new"]
    assert window_counts(recent.window(t)) == {"S": WindowCounts(abandoned=1)}
    off = RecentEvents(keep_for_s=0)  # an alerts service without checks keeps nothing
    off.add(BatchEvent("x", EventKind.ATOMIC_ABANDONED, t, "S", "a2"))
    assert off.window(t) == []


def test_a_figure_from_assumed_limits_says_it_was_assumed():
    facts = replace(QUIET, counts={"S": WindowCounts(abandoned=1, abandoned_timeout=1)}, limits_assumed=True)
    [found] = evaluate(facts, codes=["BATCH_006"]).findings
    assert "batch timeout (10 s, assumed: /varz was not read)" in found.evidence
    assert "assumed" not in evaluate(replace(facts, limits_assumed=False), codes=["BATCH_006"]).findings[0].evidence


def test_a_notebooks_checks_rows_are_plain_values_and_the_table_marks_them_up():
    """Before, `rows` held the table's HTML: rows[rows.severity == "critical"] found nothing."""
    from datetime import datetime, timezone

    from console.ui.checks import ChecksPage

    now = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)
    found = [{"code": "BATCH_001", "title": "t", "stream": "ORDERS", "severity": "critical", "evidence": "e",
              "remedy": "r", "first_seen": now, "last_seen": now}]
    page = ChecksPage(findings=lambda: (found, now, []))
    page.read()
    assert list(page.rows[page.rows.severity == "critical"].stream) == ["ORDERS"]
    assert "<a " in page._table.value.stream[0] and "<b " in page._table.value.severity[0]


@pytest.mark.parametrize("results, reached, code", [
    ((CanaryResult("default", "n1", "atomic", 2.0, 4.0, 0, 10),), True, 0),
    ((CanaryResult("default", "n1", "atomic", 2.0, 4.0, 0, 10, led_elsewhere=True),), True, 1),  # was 0
    ((CanaryResult("default", "n1", "atomic", 2.0, 4000.0, 0, 10),), True, 1),
    ((CanaryResult("default", "n1", "fast", 3.0, None, 10, 10, "timeout"),), True, 2),
    ((CanaryResult("default", "n1", "fast", 3.0, None, 10, 10, "x", tampered="stream changed"),), True, 1),
    ((CanaryResult("default", "n1", "atomic", 2.0, 4.0, 0, 10),), False, 3),
])
def test_canary_once_exits_as_check_does(results, reached, code):
    from console.cli.reports import canary_exit

    assert canary_exit(list(results), reached) == code
