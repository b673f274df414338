from datetime import datetime, timedelta, timezone

import pytest

from console.domain.alert_rules import RulesError
from console.domain.alert_rules import parse_rules as parse_rules_allowing
from console.domain.notify_targets import NotifyTargets
from console.domain.alerting import HELD_AT_MOST, Evaluator
from console.domain.events import BatchEvent, EventKind

ALLOWED = NotifyTargets(webhook_hosts=("127.0.0.1",), nats_prefixes=("alerts",))


def parse_rules(text: str):
    """The rules, with the targets these tests name allowed."""
    return parse_rules_allowing(text, ALLOWED)


T0 = datetime(2026, 11, 21, 3, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


RULES = """
[[rule]]
name = "orders abandoned"
when = "lost_batches"
streams = ["ORD*"]
reasons = ["timeout", "incomplete"]
at_least = 2
within = "1m"
severity = "critical"
notify = ["webhook:http://127.0.0.1:9/hook", "nats:alerts.batches"]
remedy = "check the publisher's pacing"

[[rule]]
name = "collector silent"
when = "collector_silent"
within = "30s"
"""


def abandoned(i: float, stream: str = "ORDERS", reason: str = "timeout") -> BatchEvent:
    return BatchEvent(f"a{i}", EventKind.ATOMIC_ABANDONED, at(i), stream, f"b{i}", reason=reason)


def test_a_rule_fires_once_per_stream_and_resolves_when_its_window_is_clean():
    rules = parse_rules(RULES)
    evaluator = Evaluator(rules)
    evaluator.apply(BatchEvent("s", EventKind.COLLECTOR_STATUS, at(0)))
    evaluator.apply(abandoned(1))
    evaluator.apply(abandoned(2, reason="large"))  # not a reason this rule watches
    evaluator.apply(abandoned(3, stream="PAYMENTS"))  # not a stream it watches
    assert evaluator.evaluate(at(4)) == []
    evaluator.apply(abandoned(5))
    [firing] = evaluator.evaluate(at(6))
    assert (firing.rule, firing.status, firing.stream, firing.count, firing.batch_ids) == (
        "orders abandoned", "firing", "ORDERS", 2, ("b5", "b1"))
    assert firing.text.startswith("[CRITICAL] orders abandoned firing on ORDERS: 2 in the window (timeout)")
    assert firing.notify == ("webhook:http://127.0.0.1:9/hook", "nats:alerts.batches")
    assert firing.to_json("http://console/incident?batch=b5")["text"] == firing.text
    assert evaluator.evaluate(at(7)) == []  # once until resolved
    [resolved] = [n for n in evaluator.evaluate(at(62)) if n.rule == "orders abandoned"]
    assert (resolved.status, resolved.since) == ("resolved", at(6))


def test_the_firing_state_survives_a_restart_and_a_retracted_loss_counts_no_more():
    evaluator = Evaluator(parse_rules(RULES))
    evaluator.apply(BatchEvent("s", EventKind.COLLECTOR_STATUS, at(0)))
    for i in (1, 2):
        evaluator.apply(abandoned(i))
    assert len(evaluator.evaluate(at(3))) == 1
    again = Evaluator(parse_rules(RULES))
    again.restore(evaluator.state())
    again.apply(BatchEvent("s", EventKind.COLLECTOR_STATUS, at(0)))
    for i in (1, 2):
        again.apply(abandoned(i))
    assert again.evaluate(at(4)) == []  # already fired before the restart
    fast = Evaluator(parse_rules(RULES.replace('reasons = ["timeout", "incomplete"]', 'reasons = ["dropped"]')))
    fast.apply(BatchEvent("s", EventKind.COLLECTOR_STATUS, at(0)))
    for i in (1, 2):
        fast.apply(BatchEvent(f"d{i}", EventKind.FAST_DROPPED, at(i), "ORDERS", f"f{i}", inferred=True))
    fast.apply(BatchEvent("r", EventKind.LOSS_RETRACTED, at(3), None, "f1"))
    assert fast.evaluate(at(4)) == []


def test_a_silent_collector_fires():
    evaluator = Evaluator(parse_rules(RULES))
    evaluator.apply(BatchEvent("s", EventKind.COLLECTOR_STATUS, at(0)))
    assert evaluator.evaluate(at(10)) == []
    [silent] = evaluator.evaluate(at(45))
    assert (silent.rule, silent.status, silent.stream) == ("collector silent", "firing", "(collector)")


def test_a_start_is_not_an_outage_the_collector_gets_its_window_from_the_first_evaluation():
    never_heard = Evaluator(parse_rules(RULES))
    assert never_heard.evaluate(at(0)) == [] and never_heard.evaluate(at(29)) == []
    never_heard.apply(BatchEvent("s", EventKind.COLLECTOR_STATUS, at(3)))  # it comes up beside the alerts
    assert never_heard.evaluate(at(30)) == []
    heard_long_ago = Evaluator(parse_rules(RULES))  # restarted after an hour: the backfill's statuses are old
    heard_long_ago.apply(BatchEvent("s0", EventKind.COLLECTOR_STATUS, at(-3600)))
    assert heard_long_ago.evaluate(at(0)) == [] and heard_long_ago.evaluate(at(20)) == []
    [silent] = heard_long_ago.evaluate(at(31))  # and then it does not come back: that is an outage
    assert silent.status == "firing"


def test_a_rule_with_for_fires_only_once_its_condition_has_held_that_long():
    rules = parse_rules(RULES.replace('within = "1m"', 'within = "1m"\nfor = "20s"'))
    evaluator = Evaluator(rules)
    for i in (0, 1):
        evaluator.apply(abandoned(i))
    assert evaluator.evaluate(at(2)) == [] and evaluator.evaluate(at(21)) == []
    [firing] = evaluator.evaluate(at(22.5))
    assert firing.status == "firing" and firing.since == at(22.5)


def test_a_muted_rule_is_firing_nowhere():
    evaluator = Evaluator(parse_rules(RULES))
    for i in (0, 1):
        evaluator.apply(abandoned(i))
    [firing] = evaluator.evaluate(at(2))
    assert ("orders abandoned", "ORDERS") in evaluator.firing
    evaluator.rules = parse_rules(RULES.replace('remedy = "check', 'muted = true\nremedy = "check'))
    assert evaluator.evaluate(at(3)) == [] and ("orders abandoned", "ORDERS") not in evaluator.state()
    evaluator.apply(abandoned(4))
    assert evaluator.evaluate(at(5)) == [] and evaluator.firing == {}


@pytest.mark.parametrize("text, line, reason", [
    ('[[rule]]\nname = "x"\nwhen = "lost_batchez"\n', 1, "when must be one of"),
    ('[[rule]]\nname = "x"\nwhen = "rejected"\n\n[[rule]]\nname = "y"\nwhen = "rejected"\nwithin = "5 minutes"\n',
     5, "within must be a duration"),
    ('[[rule]]\nname = "x"\nwhen = "rejected"\nnotify = ["mailto:ops"]\n', 1, "notify target"),
    ('[[rule]]\nname = "x"\nwhen = "rejected"\nstreem = ["A"]\n', 1, "unknown key 'streem'"),
    ('[[rule]]\nname = "x"\nwhen = "rejected"\n[[rule]]\nname = "x"\nwhen = "rejected"\n', 4, "two rules"),
    ('[[rule]]\nname = "x\nwhen = 1\n', 2, "Illegal character"),
])
def test_a_rules_file_with_an_error_is_refused_with_its_line(text, line, reason):
    with pytest.raises(RulesError) as refused:
        parse_rules(text)
    assert refused.value.line == line and reason in refused.value.reason, str(refused.value)


def test_the_shipped_rules_parse_and_cover_every_reason_the_console_records():
    from pathlib import Path

    import console.alerting
    from console.domain.reasons import OTHER, REASONS

    rules = parse_rules((Path(console.alerting.__file__).parent / "default_rules.toml").read_text())
    covered = {reason for rule in rules if rule.when == "lost_batches" for reason in rule.reasons}
    assert covered == {*REASONS, OTHER} and all(rule.remedy for rule in rules)
    catch_all = [rule for rule in rules if rule.when == "lost_batches" and rule.covers("S", "brand_new")]
    assert [rule.reasons for rule in catch_all] == [(OTHER,)]
    assert {rule.when for rule in rules} == {"lost_batches", "lost_messages", "rejected", "collector_silent",
                                             "budget_burn"}


def test_metrics_render_the_text_format_with_escaped_labels_and_fold_streams_past_the_cap(monkeypatch):
    from console.alerting import metrics as module

    monkeypatch.setattr(module, "MAX_STREAMS", 2)
    metrics = module.Metrics()
    for stream in ('A"B\\C', "D", "E", "F"):
        metrics.observe(BatchEvent(stream, EventKind.ATOMIC_ABANDONED, at(0), stream, "b", reason="timeout"))
    text = metrics.render().decode()
    assert '# TYPE batch_console_lost_batches counter' in text
    assert 'batch_console_lost_batches_total{stream="A\\"B\\\\C",kind="atomic",reason="timeout"} 1.0' in text
    assert 'batch_console_lost_batches_total{stream="other",kind="atomic",reason="timeout"} 2.0' in text


def test_rules_written_back_read_the_same():
    from pathlib import Path

    import console.alerting
    from console.domain.alert_rules import rules_toml

    shipped = parse_rules((Path(console.alerting.__file__).parent / "default_rules.toml").read_text())
    tricky = parse_rules(RULES.replace('"look', '"look').replace('remedy = "check', 'repeat = "90s"\nmuted = true\nremedy = "check \\"it\\"\\n'))
    for rules in (shipped, tricky):
        assert parse_rules(rules_toml(rules)) == rules


def test_a_gap_recorded_under_no_stream_moves_to_the_stream_its_commit_names():
    from console.alerting.metrics import Metrics
    from console.domain.live_model import LiveModel

    rules = parse_rules('[[rule]]\nname = "lost messages"\nwhen = "lost_messages"\nat_least = 1\nwithin = "5m"\n')
    evaluator, metrics, live = Evaluator(rules), Metrics(), LiveModel()
    now = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
    gap = BatchEvent("fi.b1.gap.5", EventKind.FAST_GAP, now, None, "b1", gap_mode="ok", seq=5, first_lost_seq=4, lost=1)
    for e in (evaluator, metrics, live):
        e.apply(gap) if hasattr(e, "apply") else e.observe(gap)
    assert evaluator.evaluate(now) == []  # not "(unknown)" at once: its stream is often a moment away
    assert list(metrics.lost_messages.samples.values()) == []  # waits for the batch's stream
    attributed = BatchEvent("fi.b1.attributed", EventKind.FAST_ATTRIBUTED, now, "ORDERS", "b1", gap_mode="ok")
    committed = BatchEvent("fi.b1.committed", EventKind.FAST_COMMITTED, now, "ORDERS", "b1", gap_mode="ok", count=12)
    for event in (attributed, committed):
        evaluator.apply(event)
        metrics.observe(event)
        live.apply(event)
    moved = evaluator.evaluate(now + timedelta(seconds=1))
    assert [(n.stream, n.status) for n in moved] == [("ORDERS", "firing")]  # one notice, on its stream
    assert evaluator.evaluate(now + timedelta(seconds=30)) == []
    assert metrics.lost_messages.samples == {("ORDERS",): 1.0}
    assert metrics.gaps.samples == {("ORDERS", "ok"): 1.0}


def test_a_gap_named_late_on_a_loaded_host_pages_once_on_its_stream_never_on_unknown():
    """The collector ran late (a saturated host) and named the batch 30 s after its gap: no clock pages
    "(unknown)" meanwhile."""
    rules = parse_rules('[[rule]]\nname = "lost messages"\nwhen = "lost_messages"\nat_least = 1\nwithin = "5m"\n')
    evaluator = Evaluator(rules)
    now = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
    evaluator.apply(BatchEvent("fi.b2.gap.5", EventKind.FAST_GAP, now, None, "b2", gap_mode="ok", seq=5,
                               first_lost_seq=4, lost=1))
    assert [evaluator.evaluate(now + timedelta(seconds=s)) for s in (5, 11, 29)] == [[], [], []]
    evaluator.apply(BatchEvent("fi.b2.committed", EventKind.FAST_COMMITTED, now + timedelta(seconds=30), "ORDERS",
                               "b2", gap_mode="ok", count=12))
    [fired] = evaluator.evaluate(now + timedelta(seconds=31))
    assert (fired.stream, fired.status, fired.count) == ("ORDERS", "firing", 1)


def test_a_gap_of_a_batch_that_ends_unnamed_or_is_never_heard_of_again_pages_as_unknown():
    rules = parse_rules('[[rule]]\nname = "lost messages"\nwhen = "lost_messages"\nat_least = 1\nwithin = "30m"\n')
    now = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
    ended, silent = Evaluator(rules), Evaluator(rules)
    for evaluator, batch in ((ended, "b3"), (silent, "b4")):
        evaluator.apply(BatchEvent(f"fi.{batch}.gap.5", EventKind.FAST_GAP, now, None, batch, gap_mode="ok", seq=5,
                                   first_lost_seq=4, lost=1))
    ended.apply(BatchEvent("fi.b3.dropped", EventKind.FAST_DROPPED, now + timedelta(seconds=12), None, "b3",
                           gap_mode="ok", inferred=True))
    [fired] = ended.evaluate(now + timedelta(seconds=13))
    assert (fired.stream, fired.status, fired.count) == ("(unknown)", "firing", 1)
    assert silent.evaluate(now + HELD_AT_MOST - timedelta(seconds=1)) == []
    [fired] = silent.evaluate(now + HELD_AT_MOST + timedelta(seconds=1))
    assert (fired.stream, fired.status, fired.count) == ("(unknown)", "firing", 1)


def test_a_finding_rule_fires_on_the_checks_findings_and_resolves_when_they_are_gone():
    from console.domain.alert_rules import parse_rules
    from console.domain.alerting import DEPLOYMENT, Evaluator

    [rule] = parse_rules('[[rule]]\nname = "abandonments"\nwhen = "finding"\nreasons = ["BATCH_009"]\n'
                         'streams = ["ORD*"]\n')
    evaluator = Evaluator([rule])
    now = datetime(2026, 11, 25, tzinfo=timezone.utc)
    evaluator.set_findings([{"code": "BATCH_009", "stream": "ORDERS", "severity": "warning"},
                            {"code": "BATCH_009", "stream": "OTHER", "severity": "warning"},
                            {"code": "BATCH_022", "stream": "", "severity": "warning"}])
    [fired] = evaluator.evaluate(now)
    assert (fired.rule, fired.stream, fired.status, fired.reasons) == ("abandonments", "ORDERS", "firing", ("BATCH_009",))
    assert evaluator.evaluate(now) == []  # still firing: said once
    evaluator.set_findings([{"code": "BATCH_022", "stream": "", "severity": "warning"}])
    [resolved] = evaluator.evaluate(now)
    assert (resolved.stream, resolved.status) == ("ORDERS", "resolved")
    [any_code] = parse_rules('[[rule]]\nname = "deployment"\nwhen = "finding"\n')
    deployment = Evaluator([any_code])
    deployment.set_findings([{"code": "BATCH_022", "stream": "", "severity": "warning"}])
    assert [n.stream for n in deployment.evaluate(now)] == [DEPLOYMENT]


def test_a_finding_rule_names_check_codes_only():
    from console.domain.alert_rules import RulesError, parse_rules

    with pytest.raises(RulesError) as refused:
        parse_rules('[[rule]]\nname = "x"\nwhen = "finding"\nreasons = ["timeout"]\n')
    assert "check codes" in str(refused.value) and refused.value.line == 1


def test_a_rule_may_name_systems_and_a_notice_names_its_system():
    from dataclasses import replace

    [rule] = parse_rules('[[rule]]\nname = "x"\nwhen = "rejected"\nsystems = ["prod-*"]\n')
    assert rule.covers_system("prod-eu") and not rule.covers_system("staging")
    assert parse_rules('[[rule]]\nname = "x"\nwhen = "rejected"\n')[0].covers_system("anything")
    for hostile in ('"prod"', "[1]", '[""]', f'["{"x" * 600}"]'):
        with pytest.raises(RulesError, match="systems must be a list of strings"):
            parse_rules(f'[[rule]]\nname = "x"\nwhen = "rejected"\nsystems = {hostile}\n')
    evaluator = Evaluator(parse_rules(RULES))
    for i in (0, 1):
        evaluator.apply(abandoned(i))
    [notice] = evaluator.evaluate(at(2))
    named = replace(notice, system="prod-eu")
    assert " on prod-eu ORDERS:" in named.text and named.to_json()["system"] == "prod-eu"
    assert "system" not in notice.to_json() and " on ORDERS:" in notice.text


def test_metrics_of_several_systems_render_each_metric_once_each_sample_with_its_system():
    from console.alerting.metrics import Metrics, render

    eu, us = Metrics("eu"), Metrics("us")
    eu.observe(BatchEvent("1", EventKind.ATOMIC_ABANDONED, at(0), "S", "b1", reason="timeout"))
    us.observe(BatchEvent("2", EventKind.ATOMIC_ABANDONED, at(0), "S", "b2", reason="timeout"))
    text = render(eu, us).decode()
    assert text.count("# TYPE batch_console_lost_batches counter") == 1
    for name in ("eu", "us"):
        assert f'batch_console_lost_batches_total{{system="{name}",stream="S",kind="atomic",reason="timeout"}} 1.0' in text


def test_the_hint_for_rules_without_targets_draws_no_link_to_a_placeholder_host():
    """The Alerts page drew `https://HOST/` as a link: the placeholder is in a code span now."""
    import html

    from markdown_it import MarkdownIt

    from console.domain.alert_rules import NO_TARGET

    drawn = MarkdownIt("commonmark").enable("linkify").render(html.escape(NO_TARGET, quote=False))
    assert "<a " not in drawn and "<code>notify = [&quot;webhook:https://HOST/...&quot;]</code>" in drawn
