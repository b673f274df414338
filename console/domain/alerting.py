"""Alert rules evaluated over the event log: pure. apply() every event, evaluate() on a clock; each
(rule, stream) fires once, again after the rule's repeat interval, and resolves when its window is
clean. The state can be saved and restored, so a restart does not fire again what already fired."""

from __future__ import annotations

import fnmatch
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterator

from console.domain.alert_rules import SEVERITIES, Rule
from console.domain.budgets import BudgetStatus
from console.domain.consumer_lag import Judged
from console.domain.events import FAST_ENDS, LOST_KINDS, UNKNOWN_STREAM, BatchEvent, EventKind
from console.domain.live_model import lost_batch

MAX_KEYS = 10_000  # (rule, stream) windows kept; the quietest go first
MAX_ENTRIES = 10_000  # observations per window
MAX_BATCH_IDS = 20
MAX_PUBLISHERS = 5  # a notification names at most this many publishing connections
COLLECTOR = "(collector)"  # the stream key of collector_silent
DEPLOYMENT = "(deployment)"  # the stream key of a health check's finding about no one stream
# A fast batch's loss is often seen before its stream (the commit or the collector's lookup names it a
# moment later): one under no stream counts only once it has gone this long unattributed, so it pages on
# its stream, not on "(unknown)" first and then again (a fire and a resolve a second apart, every demo round)
ATTRIBUTION_GRACE = timedelta(seconds=10)
# A fast batch's gaps seen under no stream wait for the batch to be named or to end (its end names its
# stream when the server's last reply does), however long that takes on a loaded host: a clock alone paged
# "(unknown)" when the collector ran late. A batch neither named nor ended this long counts as unknown.
HELD_AT_MOST = timedelta(minutes=10)
MAX_HELD = 10_000  # batches whose gaps wait; past it the oldest count as unknown


@dataclass(frozen=True)
class Observation:
    time: datetime
    amount: int
    reason: str | None
    batch_id: str | None
    publisher: str | None = None  # who published the batch, when the collector could tell


@dataclass(frozen=True)
class Notice:
    rule: str
    status: str  # firing | resolved
    severity: str
    stream: str
    count: int
    reasons: tuple[str, ...]
    batch_ids: tuple[str, ...]
    since: datetime
    remedy: str = ""
    notify: tuple[str, ...] = ()
    publishers: tuple[str, ...] = ()  # the connections that published the batches, newest first
    system: str = ""  # of several NATS systems, the one it fired on

    @property
    def text(self) -> str:
        """One line, as chat webhooks show it."""
        what = f"{self.count} in the window" if self.status == "firing" else "the window is clean"
        reasons = f" ({', '.join(self.reasons)})" if self.reasons else ""
        by = f"; published by {'; '.join(self.publishers)}" if self.publishers and self.status == "firing" else ""
        where = f"{self.system} {self.stream}" if self.system else self.stream
        return (f"[{self.severity.upper()}] {self.rule} {self.status} on {where}: {what}{reasons}{by}"
                + (f". {self.remedy}" if self.remedy and self.status == "firing" else ""))

    def to_json(self, link: str | None = None) -> dict[str, Any]:
        return {"rule": self.rule, "status": self.status, "severity": self.severity, "stream": self.stream,
                "count": self.count, "reasons": list(self.reasons), "batch_ids": list(self.batch_ids),
                "publishers": list(self.publishers), **({"system": self.system} if self.system else {}),
                "since": self.since.isoformat(), "text": self.text, "link": link}


@dataclass
class Firing:
    since: datetime
    last_sent: datetime


def observations(event: BatchEvent) -> list[tuple[str, str, Observation]]:
    """(measure, stream, observation) an event adds."""
    stream = event.stream or UNKNOWN_STREAM
    if event.kind in LOST_KINDS:
        lost = lost_batch(event)
        return [("lost_batches", stream, Observation(event.time, 1, lost.reason, event.batch_id, lost.publisher))]
    if event.kind is EventKind.FAST_GAP and event.lost:
        publisher = event.publisher.line() if event.publisher else None
        return [("lost_messages", stream, Observation(event.time, event.lost, "gap", event.batch_id, publisher))]
    if event.kind in (EventKind.FAST_REJECTED, EventKind.ATOMIC_REJECTED):
        return [("rejected", stream, Observation(event.time, 1, str(event.err_code), event.batch_id))]
    return []


@dataclass
class Evaluator:
    rules: list[Rule]
    windows: dict[tuple[str, str], deque[Observation]] = field(default_factory=dict)  # (measure, stream)
    firing: dict[tuple[str, str], Firing] = field(default_factory=dict)  # (rule name, stream)
    collector_seen: datetime | None = None
    started: datetime | None = None  # the first evaluation: a collector not heard from yet is given `within`
    pending: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (rule, stream) -> condition since
    findings: dict[tuple[str, str], str] = field(default_factory=dict)  # the checks' (code, stream) -> severity
    held: dict[str, list[tuple[str, Observation]]] = field(default_factory=dict)  # batch id -> its unnamed gaps
    # objective -> its measures burning on a workbook pair: (measure, long, short, severity, rate)
    burning: dict[str, list[tuple[str, str, str, str, float]]] = field(default_factory=dict)
    consumers: dict[str, tuple[int, float | None]] = field(default_factory=dict)  # "stream/name" -> (pending, lag s)

    def set_budgets(self, statuses: list[BudgetStatus]) -> None:
        """The loss budgets' last evaluation: what `budget_burn` rules fire on."""
        self.burning = {}
        for status in statuses:
            if (pair := status.burning) is not None:
                self.burning.setdefault(status.objective, []).append((status.measure, *pair))

    def set_consumers(self, judged: list[Judged]) -> None:
        """Every consumer's last judgement: what `consumer_pending` and `consumer_lag_seconds` rules fire on."""
        self.consumers = {f"{j.read.stream}/{j.read.name}": (j.read.pending, j.lag_seconds) for j in judged}

    def set_findings(self, found: list[dict[str, str]]) -> None:
        """The health checks' last evaluation: what `finding` rules fire on."""
        self.findings = {(f["code"], f["stream"] or DEPLOYMENT): f["severity"] for f in found}

    def apply(self, event: BatchEvent) -> None:
        if event.kind is EventKind.COLLECTOR_STATUS:
            self.collector_seen = max(self.collector_seen or event.time, event.time)
            return
        if event.kind in (EventKind.CONFORMANCE, EventKind.BATCH_MESSAGES, EventKind.STREAM_TOTALS, EventKind.CANARY,
                          EventKind.MAINTENANCE, EventKind.NODE_STOPPED, EventKind.COPY_SPLIT):
            return
        if event.kind is EventKind.FAST_ATTRIBUTED and event.batch_id and event.stream:
            self._release(event.batch_id, event.stream)
            self._attribute(event.batch_id, event.stream)
            return
        if event.kind is EventKind.LOSS_RETRACTED and event.batch_id:
            for key, entries in self.windows.items():
                if any(o.batch_id == event.batch_id for o in entries):
                    self.windows[key] = deque((o for o in entries if o.batch_id != event.batch_id), maxlen=MAX_ENTRIES)
            return
        for measure, stream, seen in observations(event):
            if stream == UNKNOWN_STREAM and event.kind is EventKind.FAST_GAP and event.batch_id:
                self.held.setdefault(event.batch_id, []).append((measure, seen))
                while len(self.held) > MAX_HELD:
                    self._release(next(iter(self.held)), UNKNOWN_STREAM)
            else:
                self._add(measure, stream, seen)
        if event.kind in FAST_ENDS and event.batch_id:
            self._release(event.batch_id, event.stream or UNKNOWN_STREAM)

    def _add(self, measure: str, stream: str, seen: Observation) -> None:
        key = (measure, stream)
        if key not in self.windows and len(self.windows) >= MAX_KEYS:
            del self.windows[min(self.windows, key=lambda k: self.windows[k][-1].time if self.windows[k] else seen.time)]
        self.windows.setdefault(key, deque(maxlen=MAX_ENTRIES)).append(seen)

    def _release(self, batch_id: str, stream: str) -> None:
        """A held batch's gaps counted under its stream, now it is named (or has ended unnamed)."""
        for measure, seen in self.held.pop(batch_id, []):
            self._add(measure, stream, seen)

    def _attribute(self, batch_id: str, stream: str) -> None:
        """The batch's observations made under no stream move to its stream: an alert raised on
        "(unknown)" resolves there and fires on the stream if the stream's window holds enough."""
        for (measure, where), entries in list(self.windows.items()):
            if where != UNKNOWN_STREAM or not any(o.batch_id == batch_id for o in entries):
                continue
            self.windows[(measure, where)] = deque((o for o in entries if o.batch_id != batch_id), maxlen=MAX_ENTRIES)
            moved = [o for o in entries if o.batch_id == batch_id]
            merged = sorted([*self.windows.get((measure, stream), ()), *moved], key=lambda o: o.time)
            self.windows[(measure, stream)] = deque(merged, maxlen=MAX_ENTRIES)

    def evaluate(self, now: datetime) -> list[Notice]:
        notices: list[Notice] = []
        self.started = self.started or now
        longest = max((r.within for r in self.rules), default=timedelta(0))
        for batch_id in [b for b, held in self.held.items() if held[0][1].time < now - HELD_AT_MOST]:
            self._release(batch_id, UNKNOWN_STREAM)
        for key, entries in list(self.windows.items()):  # nothing older than the longest window is needed
            while entries and entries[0].time < now - longest:
                entries.popleft()
        for rule in self.rules:
            if rule.muted:  # muted is not firing anywhere: no notice, no badge, no metric
                self.firing = {k: f for k, f in self.firing.items() if k[0] != rule.name}
                self.pending = {k: t for k, t in self.pending.items() if k[0] != rule.name}
                continue
            for stream, count, seen in self._counts(rule, now):
                notices += self._transition(rule, stream, count, seen, now)
        return notices

    def _counts(self, rule: Rule, now: datetime) -> Iterator[tuple[str, int, list[Observation]]]:
        if rule.when == "collector_silent":
            # A collector starting beside the alerts (or heard from before they started) gets `within`
            # from the first evaluation: a start is not an outage.
            started = self.started or now
            last = max(self.collector_seen, started) if self.collector_seen else started
            silent = now - last > rule.within
            yield COLLECTOR, 1 if silent else 0, []
            return
        if rule.when == "finding":
            yield from self._found(rule, now)
            return
        if rule.when == "budget_burn":
            yield from self._burned(rule, now)
            return
        if rule.when in ("consumer_pending", "consumer_lag_seconds"):
            yield from self._behind(rule, now)
            return
        keys = {stream for (measure, stream) in self.windows if measure == rule.when} | \
            {stream for (name, stream) in self.firing if name == rule.name}
        for stream in keys:
            settled = now - ATTRIBUTION_GRACE if stream == UNKNOWN_STREAM else now
            seen = [o for o in self.windows.get((rule.when, stream), ())
                    if now - rule.within <= o.time <= settled and rule.covers(stream, o.reason)]
            if rule.covers(stream) or (rule.name, stream) in self.firing:
                yield stream, sum(o.amount for o in seen), seen

    def _found(self, rule: Rule, now: datetime) -> Iterator[tuple[str, int, list[Observation]]]:
        """Per stream, the findings of the rule's codes (any code when it names none)."""
        by_stream: dict[str, list[Observation]] = {}
        for (code, stream), _ in self.findings.items():
            if not rule.reasons or code in rule.reasons:
                by_stream.setdefault(stream, []).append(Observation(now, 1, code, None))
        for stream in set(by_stream) | {s for (name, s) in self.firing if name == rule.name}:
            if rule.covers(stream) or (rule.name, stream) in self.firing:
                seen = by_stream.get(stream, [])
                yield stream, len(seen), seen

    def _behind(self, rule: Rule, now: datetime) -> Iterator[tuple[str, int, list[Observation]]]:
        """Per consumer ("stream/name"; the rule's streams are stream globs, its reasons consumer globs): its
        pending messages or its lag in whole seconds, which fire the rule from at_least."""
        for key in set(self.consumers) | {s for (name, s) in self.firing if name == rule.name}:
            stream, _, consumer = key.partition("/")
            pending, lag = self.consumers.get(key, (0, None))
            amount = pending if rule.when == "consumer_pending" else int(lag or 0)
            covered = rule.covers(stream) and (not rule.reasons or any(fnmatch.fnmatchcase(consumer, g) for g in rule.reasons))
            if covered or (rule.name, key) in self.firing:
                unit = "messages pending" if rule.when == "consumer_pending" else "s behind"
                yield key, amount if covered else 0, [Observation(now, amount, f"{amount} {unit}", None)]

    def _burned(self, rule: Rule, now: datetime) -> Iterator[tuple[str, int, list[Observation]]]:
        """Per objective (the rule's `streams` are globs of objective names): its measures burning on a
        pair of the rule's severity or a graver one (a warning rule fires on the paging pairs too)."""
        floor = SEVERITIES.index(rule.severity)
        for objective in set(self.burning) | {s for (name, s) in self.firing if name == rule.name}:
            seen = [Observation(now, 1, f"{measure}: {rate:.1f}x over {long} and {short}", None)
                    for measure, long, short, severity, rate in self.burning.get(objective, ())
                    if SEVERITIES.index(severity) >= floor and (not rule.reasons or measure in rule.reasons)]
            if rule.covers(objective) or (rule.name, objective) in self.firing:
                yield objective, len(seen), seen

    def _transition(self, rule: Rule, stream: str, count: int, seen: list[Observation], now: datetime) -> list[Notice]:
        key = (rule.name, stream)
        state = self.firing.get(key)
        if count >= rule.at_least:
            if state is None and rule.pending_for is not None:  # it must hold for a while first
                since = self.pending.setdefault(key, now)
                if now - since < rule.pending_for:
                    return []
            self.pending.pop(key, None)
            if state is None:
                self.firing[key] = Firing(now, now)
            elif rule.repeat is not None and now - state.last_sent >= rule.repeat:
                state.last_sent = now
            else:
                return []
            return [self._notice(rule, stream, "firing", count, seen, self.firing[key].since)]
        self.pending.pop(key, None)
        if state is not None:
            del self.firing[key]
            return [self._notice(rule, stream, "resolved", count, seen, state.since)]
        return []

    @staticmethod
    def _notice(rule: Rule, stream: str, status: str, count: int, seen: list[Observation], since: datetime) -> Notice:
        reasons = tuple(sorted({o.reason for o in seen if o.reason}))
        batch_ids = tuple(dict.fromkeys(o.batch_id for o in reversed(seen) if o.batch_id))[:MAX_BATCH_IDS]
        publishers = tuple(dict.fromkeys(o.publisher for o in reversed(seen) if o.publisher))[:MAX_PUBLISHERS]
        return Notice(rule.name, status, rule.severity, stream, count, reasons, batch_ids, since, rule.remedy,
                      rule.notify, publishers)

    def state(self) -> dict[tuple[str, str], tuple[datetime, datetime]]:
        """What must survive a restart: {(rule, stream): (firing since, last sent)}."""
        return {key: (f.since, f.last_sent) for key, f in self.firing.items()}

    def restore(self, saved: dict[tuple[str, str], tuple[datetime, datetime]]) -> None:
        for key, (since, last_sent) in saved.items():
            self.firing[key] = Firing(since, last_sent)
