"""Loss budgets' pure part: the objectives file read strictly, counts over windows, the SRE workbook's
burn-rate pairs (a long burn with a short one fires; a short spike alone or a long burn that has
stopped does not), and the stream totals split to fit an event."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from console.domain.budgets import (
    BURN_PAIRS,
    CountRow,
    Counts,
    ObjectivesError,
    budget_statuses,
    burn_rate,
    burning,
    counts_of,
    parse_objectives,
    totals_events,
)
from console.domain.events import MAX_EVENT

NOW = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)
ORDERS = '[[objective]]\nname = "orders"\nstreams = ["ORD*"]\nlost_messages_per_million = 10\n'


def rows_every_5m(hours: float, stored: int, lost_at: dict[int, int] | None = None, stream="ORDERS"):
    """A steady stream for `hours` up to NOW, `stored` messages a bucket, and losses in the buckets so
    many before NOW's (0: NOW's own)."""
    n = int(hours * 12)
    return [CountRow(NOW - timedelta(minutes=5 * ago), stream, "", stored=stored,
                     lost_messages=(lost_at or {}).get(ago, 0)) for ago in range(n, -1, -1)]


def test_an_objectives_file_is_read_with_its_defaults():
    [o] = parse_objectives(ORDERS)
    assert o.window == timedelta(days=28) and o.allowed("messages") == 1e-5 and o.allowed("batches") is None
    assert o.covers("ORDERS") and not o.covers("PAYMENTS")


@pytest.mark.parametrize("text, said", [
    ("[[objective]]\nname = 'x'\nstreams = ['A']\n", "lost_messages_per_million or lost_batches_per_thousand"),
    ("[[objective]]\nname = 'x'\nstreams = []\nlost_messages_per_million = 1\n", "streams"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_messages_per_million = 0\n", "above 0"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_messages_per_million = true\n", "above 0"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_batches_per_thousand = 1000\n", "below 1,000"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_messages_per_million = 1\nwindow = '2h'\n", "1d to 90d"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_messages_per_million = 1\nwindow = 28\n", "duration"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_messages_per_million = 1\ncolour = 1\n", "unknown key"),
    ("[[objective]]\nname = \"x\\u0007\"\nstreams = ['A']\nlost_messages_per_million = 1\n", "name"),
    ("[[objective]]\nname = '" + "n" * 101 + "'\nstreams = ['A']\nlost_messages_per_million = 1\n", "name"),
    (ORDERS + ORDERS, "two objectives"),
    ("[[objective]]\nname = 'x'\nstreams = ['A']\nlost_messages_per_million = 1\npublishers = [1]\n", "publishers"),
    ("objective = 1\n", "array of tables"),
    ("[rule]\n", "unknown table"),
    ("[[objective]\n", "not TOML"),
    ("x = " + "[" * 5000 + "]" * 5000, "not TOML"),
])
def test_an_objectives_file_with_an_error_is_refused_with_its_line(text, said):
    with pytest.raises(ObjectivesError) as e:
        parse_objectives(text)
    assert said in str(e.value)
    if "[[objective]]" in text and "two" not in said:
        assert e.value.line == 1


def test_a_rate_is_not_known_with_nothing_published_and_never_zero_or_infinite():
    assert burn_rate(Counts(lost=3, total=0), 1e-5) is None
    assert burn_rate(Counts(lost=3, total=100, known=False), 1e-3) is None
    assert burn_rate(Counts(lost=0, total=100), 1e-3) == 0.0


def test_a_publisher_objective_counts_what_its_publishers_did():
    [o] = parse_objectives('[[objective]]\nname = "svc"\nstreams = ["*"]\npublishers = ["order-svc*"]\n'
                           'lost_messages_per_million = 10\n')
    rows = [CountRow(NOW, "ORDERS", "", stored=1_000_000),
            CountRow(NOW, "ORDERS", "order-svc (python 2.7)", fast_stored=9_990, lost_messages=10),
            CountRow(NOW, "ORDERS", "billing (go 1.41)", fast_stored=5_000, lost_messages=50)]
    assert counts_of(o, "messages", rows) == Counts(10, 10_000)
    [stream_wide] = parse_objectives(ORDERS)
    assert counts_of(stream_wide, "messages", rows) == Counts(60, 1_000_000 + 60)


def _burning_now(rows) -> tuple | None:
    [status] = budget_statuses(parse_objectives(ORDERS), rows, NOW)
    return status.burning


def test_a_sustained_burn_fires_the_fast_pair_and_a_short_spike_alone_does_not():
    # 100,000 messages a bucket; 10 per million allowed: 1 lost a bucket is a burn rate of 1
    sustained = rows_every_5m(72, 100_000, {ago: 20 for ago in range(25)})  # 20x for the last two hours
    long, short, severity, rate = _burning_now(sustained)
    assert (long, short, severity) == ("1h", "5m", "critical") and rate >= 14.4
    spike = rows_every_5m(72, 100_000, {1: 40})  # one bucket at 40x five minutes ago, else none lost
    [status] = budget_statuses(parse_objectives(ORDERS), spike, NOW)
    assert status.burns["5m"] >= 14.4 > status.burns["1h"] and _burning_now(spike) is None
    stopped = rows_every_5m(72, 100_000, {ago: 20 for ago in range(13, 25)})  # an hour at 20x, then an hour quiet
    assert _burning_now(stopped) is None  # the short windows have recovered: the alert resolves


def test_the_pairs_are_the_workbooks():
    assert [(p[0], p[1], p[2]) for p in BURN_PAIRS] == [("1h", "5m", 14.4), ("6h", "30m", 6.0), ("1d", "2h", 3.0),
                                                      ("3d", "6h", 1.0)]
    assert burning({"1h": 20.0, "5m": 20.0}) == ("1h", "5m", "critical", 20.0)
    assert burning({"1h": 20.0, "5m": None}) is None


def test_stream_totals_fit_in_events_of_their_own_size():
    many = {f"STREAM_{i:05d}_" + "x" * 200: i for i in range(2_000)}
    events = totals_events("inst", NOW, many, {"STREAM_00001": 3})
    assert len(events) > 1 and len({e.event_id for e in events}) == len(events)
    assert all(len(e.to_json()) < MAX_EVENT for e in events)
    seen: dict[str, int] = {}
    for e in events:
        seen.update(json.loads(e.detail)["last_seq"])
    assert seen == many


def test_the_atomic_tally_puts_each_batch_to_its_publisher_and_its_commit_where_the_batch_went():
    from console.domain.atomic_tracker import PUBLISHER_WAIT, AtomicTally

    tally, later = AtomicTally(), NOW + timedelta(seconds=PUBLISHER_WAIT + 1)
    who = {"b1": "billing (go 1.41)", "b2": None, "b3": "billing (go 1.41)"}  # b2: still asked
    for batch in ("b1", "b2", "b3"):
        tally.opened(batch, "BILL", "_INBOX.x.1", NOW)
    tally.opened("b1", "BILL", "_INBOX.x.1", NOW)  # a copy of its first message: counted once
    tally.committed("b1", "BILL", 5)  # before its publisher is known: counted with it
    tally.settle(lambda batch, reply: who[batch], NOW)
    tally.committed("b3", "BILL", 7)  # after: where the batch went
    tally.committed("nobody-saw-it-open", "BILL", 2)
    assert tally.counts == {"BILL": {"billing (go 1.41)": [2, 12], "": [0, 2]}}
    tally.settle(lambda batch, reply: None, later)  # never answered: no one's, once it has waited
    assert tally.counts["BILL"][""] == [1, 2] and not tally.waiting


def test_the_atomic_tally_is_bounded_and_one_streams_counts_fit_in_an_event():
    from console.domain.atomic_tracker import MAX_STREAM_PUBLISHERS, MAX_TALLIED, MAX_WAITING, AtomicTally

    tally = AtomicTally()
    for i in range(MAX_WAITING + 50):  # a flood of first messages nobody answers for
        tally.opened(f"b{i}", "FLOOD", "_INBOX.x.1", NOW)
    assert len(tally.waiting) == MAX_WAITING and tally.counts["FLOOD"][""] == [50, 0]
    tally.settle(lambda batch, reply: "p-" + batch + "x" * 300 if batch.endswith("7") else f"p-{batch}", NOW)
    assert not tally.waiting and len(tally.counts["FLOOD"]) <= MAX_STREAM_PUBLISHERS + 1
    assert sum(c[0] for c in tally.counts["FLOOD"].values()) == MAX_WAITING + 50  # every batch counted, once
    for s in range(MAX_TALLIED):
        tally.opened(f"s{s}", f"S{s}", "_INBOX.x.1", NOW)
    tally.settle(lambda batch, reply: "one", NOW)
    assert sum(map(len, tally.counts.values())) <= MAX_TALLIED + 1
    long_names = {"BILL": {"x" * 250 + f"{i:04d}": [i, i] for i in range(MAX_STREAM_PUBLISHERS + 1)}}
    events = totals_events("inst", NOW, {}, {}, long_names)
    assert all(len(e.to_json()) < MAX_EVENT for e in events)
    assert json.loads(events[0].detail)["atomic_publishers"] == long_names


def test_budget_burn_rules_fire_on_their_severitys_pairs_and_resolve_when_the_short_window_recovers():
    from console.alerting.metrics import Metrics
    from console.domain.alert_rules import parse_rules
    from console.domain.alerting import Evaluator

    rules = parse_rules('[[rule]]\nname = "fast"\nwhen = "budget_burn"\nseverity = "critical"\n'
                        '[[rule]]\nname = "slow"\nwhen = "budget_burn"\nseverity = "warning"\n'
                        '[[rule]]\nname = "others"\nwhen = "budget_burn"\nstreams = ["billing*"]\n')
    evaluator, metrics, objectives = Evaluator(rules), Metrics(), parse_objectives(ORDERS)
    paging = budget_statuses(objectives, rows_every_5m(72, 100_000, {ago: 20 for ago in range(25)}), NOW)
    evaluator.set_budgets(paging)
    metrics.budgets(paging)
    fired = evaluator.evaluate(NOW)
    assert sorted((n.rule, n.status, n.stream) for n in fired) == [("fast", "firing", "orders"),
                                                                   ("slow", "firing", "orders")]
    assert "messages: 20.0x over 1h and 5m" in fired[0].reasons
    text = metrics.render().decode()
    assert 'batch_console_budget_burn_rate{objective="orders",measure="messages",window="1h"} 19.99' in text
    ticket = budget_statuses(objectives, rows_every_5m(72, 100_000, {ago: 4 for ago in range(12 * 24)}), NOW)
    evaluator.set_budgets(ticket)  # 4x for a day: a ticket pair (1d and 2h at 3x), not a page
    assert [(n.rule, n.status) for n in evaluator.evaluate(NOW)] == [("fast", "resolved")]
    evaluator.set_budgets(budget_statuses(objectives, rows_every_5m(72, 100_000), NOW))
    assert [(n.rule, n.status) for n in evaluator.evaluate(NOW)] == [("slow", "resolved")]


def test_the_check_finds_a_spent_budget_a_burning_one_and_says_when_there_are_none():
    from console.domain.checks import Facts, evaluate

    [objective] = parse_objectives(ORDERS)
    spent = budget_statuses([objective], rows_every_5m(72, 100_000, {ago: 40 for ago in range(100)}), NOW)
    report = evaluate(Facts(budgets=tuple(spent)), codes=["BATCH_031"])
    [finding] = report.findings
    assert finding.severity == "critical" and "the budget is spent" in finding.evidence and "'orders'" in finding.evidence
    calm = budget_statuses([objective], rows_every_5m(72, 100_000), NOW)
    assert evaluate(Facts(budgets=tuple(calm)), codes=["BATCH_031"]).findings == ()
    unread = evaluate(Facts(), codes=["BATCH_031"])
    assert unread.unchecked == (("BATCH_031", "no loss objectives (--objectives), or no analytics tables yet"),)


@pytest.mark.parametrize("text", ["2026-13", "2026-00", "26-11", "2026-1", "2026-11-01", "x" * 100, "2026-11\n",
                                  "1900-01", ""])
def test_a_month_that_is_not_one_is_refused(text):
    from console.domain.monthly_report import month_bounds

    with pytest.raises(ValueError):
        month_bounds(text)


def test_a_month_report_keeps_every_name_inert_in_markdown_and_html():
    from console.domain.monthly_report import MonthReport, ObjectiveMonth, as_html, markdown, month_bounds

    assert month_bounds("2026-12") == (datetime(2026, 12, 1, tzinfo=timezone.utc),
                                       datetime(2027, 1, 1, tzinfo=timezone.utc))
    hostile = "<img src=x onerror=alert(1)>|*x*"
    report = MonthReport("2026-11", [{"stream": "S", "atomic": 1, "fast": 2, "lost_messages": 3, "stored": 4,
                                      "batches": 5}],
                         [{"publisher": hostile, "atomic": 1, "fast": 0}], [{"day": "2026-11-02", "batches": 3,
                                                                             "messages": 3}],
                         [ObjectiveMonth(parse_objectives(ORDERS)[0], "messages", Counts(3, 1_000_000))])
    text, page = markdown(report), as_html(report)
    assert "<img" not in text and "\\|" in text and "3 batches lost" in text and "30.0%" in text
    assert "<img" not in page and "&lt;img" in page and "<script" not in page and "<svg" in page


def test_an_objectives_file_is_read_again_when_it_changes_and_a_broken_change_or_its_removal_keeps_the_last(tmp_path):
    import dataclasses

    from console.config import Settings, Watched
    from console.errors import ConfigError
    from console.runtime import objectives_of

    path = tmp_path / "objectives.toml"
    settings = Settings()
    settings = dataclasses.replace(settings, data=dataclasses.replace(settings.data, objectives=path))
    watched = Watched(path, lambda: objectives_of(settings))
    with pytest.raises(ConfigError):  # at the start, an error is the caller's: the process stops with it
        watched()
    path.write_text(ORDERS)
    assert [o.name for o in Watched(path, lambda: objectives_of(settings))()] == ["orders"]
    watched = Watched(path, lambda: objectives_of(settings))
    watched()
    path.write_text(ORDERS + ORDERS.replace('"orders"', '"more"'))
    assert [o.name for o in watched()] == ["orders", "more"] and watched.error is None
    for broken in (ORDERS + "window = 7\n", "\x00" * 10, "[[objective]]\n" * 1000, None):
        if broken is None:
            path.unlink()
        else:
            path.write_text(broken)
        assert [o.name for o in watched()] == ["orders", "more"], broken
        assert watched.error and "objectives" in watched.error
    path.write_text(ORDERS)
    assert [o.name for o in watched()] == ["orders"] and watched.error is None


def test_a_file_broken_between_a_process_start_and_its_first_read_is_said_and_counts_nothing(tmp_path):
    """The web and alerts parts check the file at their start; broken before their first page or timer,
    it is said (none counted) instead of failing the page or the loop."""
    import dataclasses

    from console.config import Settings, Watched
    from console.runtime import objectives_of

    path = tmp_path / "objectives.toml"
    settings = Settings()
    settings = dataclasses.replace(settings, data=dataclasses.replace(settings.data, objectives=path))
    path.write_text(ORDERS + "window = 7\n")
    watched = Watched(path, lambda: objectives_of(settings), fallback=list)
    assert watched() == [] and watched.error and "line" in watched.error
    path.write_text(ORDERS)
    assert [o.name for o in watched()] == ["orders"] and watched.error is None
