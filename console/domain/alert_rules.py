"""Alert rules: a TOML file of [[rule]] tables, read strictly. A file with an error is refused whole,
with the line and the reason, so a typo never silences an alert unnoticed.

    [[rule]]
    name = "atomic batches abandoned"
    when = "lost_batches"        # lost_batches | lost_messages | rejected | collector_silent | finding
                                  # | budget_burn | consumer_pending | consumer_lag_seconds
                                  # (finding: a health check's finding, its reasons check
                                  # codes; budget_burn: a loss budget burning on the SRE workbook's
                                  # multi-window pairs of the rule's severity or graver, its streams
                                  # globs of objective names; consumer_*: a consumer's pending messages
                                  # or lag in seconds at least at_least, its reasons globs of consumer
                                  # names, `for` its grace)
    streams = ["ORDERS*"]         # globs; absent = every stream
    reasons = ["timeout"]         # absent = every reason
    at_least = 1                  # how many within the window fire the rule
    within = "5m"
    for = "30s"                   # optional: how long the condition must hold before it fires
    severity = "critical"         # info | warning | critical
    notify = ["webhook:http://127.0.0.1:9000/hook", "nats:alerts.batches"]
    remedy = "what to do about it"
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any
from dataclasses import dataclass, field
from datetime import timedelta

from console.domain.checks import CHECKS
from console.domain.notify_targets import NotifyTargets, TargetRefused
from console.domain.reasons import OTHER, is_known
from console.domain.toml_text import FileRefused, duration, duration_text, read_toml, with_lines

WHEN = ("lost_batches", "lost_messages", "rejected", "collector_silent", "finding", "budget_burn", "consumer_pending",
        "consumer_lag_seconds")
CONSUMER_WHEN = ("consumer_pending", "consumer_lag_seconds")  # at_least: messages or seconds; reasons: consumer globs
SEVERITIES = ("info", "warning", "critical")
KEYS = {"name", "when", "streams", "reasons", "at_least", "within", "severity", "notify", "remedy", "repeat", "muted",
        "for", "systems"}


class RulesError(FileRefused):
    """An alert rules file the console refuses."""


@dataclass(frozen=True)
class Rule:
    name: str
    when: str
    within: timedelta
    at_least: int = 1
    streams: tuple[str, ...] = ()  # globs; empty: every stream
    systems: tuple[str, ...] = ()  # globs of a systems file's names; empty: every system
    reasons: tuple[str, ...] = ()  # empty: every reason
    severity: str = "warning"
    notify: tuple[str, ...] = ()  # webhook:URL | nats:SUBJECT
    remedy: str = ""
    repeat: timedelta | None = None  # notify again while it fires; None: once until resolved
    muted: bool = False  # neither fires nor notifies, anywhere
    pending_for: timedelta | None = None  # `for`: how long the condition must hold before the rule fires
    line: int = field(default=0, compare=False)

    def covers_system(self, system: str) -> bool:
        """Whether the rule watches this NATS system (a console of one system: always)."""
        return not self.systems or any(fnmatch.fnmatchcase(system, glob) for glob in self.systems)

    def covers(self, stream: str | None, reason: str | None = None) -> bool:
        """Whether the rule watches this stream (and this reason; None: any). The reason `other` covers
        every reason this console does not know (a newer server's)."""
        stream_ok = not self.streams or any(fnmatch.fnmatchcase(stream or "", glob) for glob in self.streams)
        return stream_ok and (reason is None or not self.reasons or reason in self.reasons
                              or (OTHER in self.reasons and not is_known(reason)))


def _strings(value: object, key: str, line: int | None) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= 512 for v in value):
        raise RulesError(f"{key} must be a list of strings", line)
    return tuple(value)


def _target(target: str, line: int | None, targets: NotifyTargets) -> str:
    try:
        return targets.check(target)
    except TargetRefused as e:
        raise RulesError(str(e), line) from None


def parse_rules(text: str, targets: NotifyTargets = NotifyTargets()) -> list[Rule]:
    """The rules of a file, or RulesError with its line; notify targets the settings (`targets`) do not
    allow are refused like any other error (by default none is allowed)."""
    data = read_toml(text, RulesError)
    unknown = set(data) - {"rule"}
    if unknown:
        raise RulesError(f"unknown table or key {sorted(unknown)[0]!r} (rules are [[rule]] tables)")
    tables = data.get("rule", [])
    if not isinstance(tables, list):
        raise RulesError("rule must be an array of tables: [[rule]]")
    rules, names = [], set()
    for table, line in with_lines(text, "rule", tables):
        rule = _rule(table, line, targets)
        if rule.name in names:
            raise RulesError(f"two rules are named {rule.name!r}", line)
        names.add(rule.name)
        rules.append(rule)
    return rules


def _rule(table: dict[str, Any], line: int | None, targets: NotifyTargets) -> Rule:
    extra = set(table) - KEYS
    if extra:
        raise RulesError(f"unknown key {sorted(extra)[0]!r}", line)
    name = table.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise RulesError("every rule needs a name (1-200 characters)", line)
    when = table.get("when")
    if when not in WHEN:
        raise RulesError(f"when must be one of {', '.join(WHEN)}, not {str(when)[:40]!r}", line)
    severity = table.get("severity", "warning")
    if severity not in SEVERITIES:
        raise RulesError(f"severity must be one of {', '.join(SEVERITIES)}", line)
    at_least = table.get("at_least", 1)
    if type(at_least) is not int or not 1 <= at_least <= 1_000_000:
        raise RulesError("at_least must be a whole number from 1", line)
    muted = table.get("muted", False)
    if type(muted) is not bool:
        raise RulesError("muted must be true or false", line)
    if when == "finding":
        codes = _strings(table.get("reasons", []), "reasons", line)
        if unknown := [c for c in codes if c not in CHECKS]:
            raise RulesError(f"a finding rule's reasons are check codes (BATCH_009, ...), not {unknown[0][:40]!r}", line)
    if when == "budget_burn" and not set(_strings(table.get("reasons", []), "reasons", line)) <= {"messages",
                                                                                                  "batches"}:
        raise RulesError("a budget_burn rule's reasons are measures: messages, batches", line)
    remedy = table.get("remedy", "")
    if not isinstance(remedy, str) or len(remedy) > 2000:
        raise RulesError("remedy must be text (at most 2000 characters)", line)
    return Rule(
        name=name, when=when, within=duration(table.get("within", "5m"), "within", line, RulesError), at_least=at_least,
        streams=_strings(table.get("streams", []), "streams", line),
        systems=_strings(table.get("systems", []), "systems", line),
        reasons=_strings(table.get("reasons", []), "reasons", line), severity=severity,
        notify=tuple(_target(t, line, targets) for t in _strings(table.get("notify", []), "notify", line)),
        remedy=remedy, repeat=duration(table["repeat"], "repeat", line, RulesError) if "repeat" in table else None,
        muted=muted, pending_for=duration(table["for"], "for", line, RulesError) if "for" in table else None, line=line or 0,
    )


def rule_toml(rule: Rule) -> str:
    """One [[rule]] table that parse_rules reads back as the same rule."""
    def text(value: object) -> str:  # a TOML basic string is a JSON string
        return json.dumps(value, ensure_ascii=False)

    lines = ["[[rule]]", f"name = {text(rule.name)}", f"when = {text(rule.when)}"]
    if rule.streams:
        lines.append(f"streams = [{', '.join(text(s) for s in rule.streams)}]")
    if rule.systems:
        lines.append(f"systems = [{', '.join(text(s) for s in rule.systems)}]")
    if rule.reasons:
        lines.append(f"reasons = [{', '.join(text(r) for r in rule.reasons)}]")
    lines += [f"at_least = {rule.at_least}", f"within = {text(duration_text(rule.within))}",
              f"severity = {text(rule.severity)}"]
    if rule.notify:
        lines.append(f"notify = [{', '.join(text(t) for t in rule.notify)}]")
    if rule.repeat is not None:
        lines.append(f"repeat = {text(duration_text(rule.repeat))}")
    if rule.pending_for is not None:
        lines.append(f"for = {text(duration_text(rule.pending_for))}")
    if rule.remedy:
        lines.append(f"remedy = {text(rule.remedy)}")
    if rule.muted:
        lines.append("muted = true")
    return "\n".join(lines) + "\n"


NO_TARGET = ("No rule has a notify target: alerts show on the Alerts page and in /metrics, and nothing is sent. "
             "To send them: allow the receivers (--webhook-hosts HOST or --notify-subjects PREFIX, or their "
             "BATCH_CONSOLE_ twins), then add `notify = [\"webhook:https://HOST/...\"]` or `[\"nats:PREFIX.x\"]` to a "
             "rule.")  # in code spans: HOST is a placeholder, never a link the Alerts page draws


def without_targets(rules: list[Rule]) -> str | None:
    """What to tell an operator whose rules send nothing anywhere, or None."""
    return NO_TARGET if rules and not any(r.notify for r in rules if not r.muted) else None


def rules_toml(rules: list[Rule]) -> str:
    return "\n".join(rule_toml(rule) for rule in rules)
