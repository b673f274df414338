"""The alerts process: one follower of the event log (so many web processes never fire the same alert
twice) that evaluates the rules every second, sends what changes, keeps the firing state in
DATA_DIR/alerts-state.json (a restart does not fire again) and feeds the Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from console.alerting.metrics import Metrics
from console.alerting.notify import Attempt, Notifier
from console.broker.connection import Connection
from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.alert_rules import Rule, parse_rules
from console.domain.alerting import Evaluator, Notice, observations

log = logging.getLogger(__name__)

DEFAULT_RULES = Path(__file__).parent / "default_rules.toml"
EVERY = 1.0  # seconds between evaluations
COLLECTOR_UP_WITHIN = timedelta(seconds=15)  # three of its status intervals


RULES_FILE = "alert-rules.toml"  # in the data directory: the rules the Alerts page edits
STATE_FILE = "alerts-state.json"  # in the data directory: what fires, what was sent, every delivery attempt
KEPT = 200  # notices and delivery attempts kept in the state file


def rules_path(given: str | os.PathLike | None, data_dir: Path) -> Path:
    """The rules file given, else DATA_DIR/alert-rules.toml once the Alerts page has saved one, else the shipped rules."""
    if given:
        return Path(given)
    edited = data_dir / RULES_FILE
    return edited if edited.exists() else DEFAULT_RULES


def load_rules(path: str | os.PathLike | None) -> list[Rule]:
    """The rules file given, else the shipped one; RulesError (with its line) for a file with an error."""
    return parse_rules(Path(path or DEFAULT_RULES).read_text())


class AlertService:
    def __init__(self, nc: Connection, event_log: EventLogSettings, rules: list[Rule], state_path: Path,
                 console_url: str | None = None, metrics: Metrics | None = None, rules_file: Path | None = None):
        self.log = EventLog(nc.jetstream(), event_log)
        self.evaluator = Evaluator(rules)
        self.notifier = Notifier(nc, console_url, on_attempt=self._record)
        self.state_path = state_path
        self.metrics = metrics
        self.applied = 0  # the last event-log sequence applied
        self.caught_up = False
        self._sending: set[asyncio.Task] = set()
        self._poke = asyncio.Event()  # set when an event may fire a rule: evaluated at once, not on the clock
        self.rules_file = rules_file  # read again when it changes (the Alerts page edits it)
        self._rules_stamp = rules_file.stat().st_mtime_ns if rules_file and rules_file.exists() else None
        self.rules_problem: str | None = None
        saved = json.loads(state_path.read_text()) if state_path.exists() else {}
        self.evaluator.restore(saved.get("firing", {}))
        self.sent_json: list[dict] = saved.get("notices", [])  # what was sent, for the Alerts page
        self.deliveries: list[dict] = saved.get("deliveries", [])  # every attempt, for the Alerts page

    async def run(self, stop: asyncio.Event) -> None:
        longest = max((r.within for r in self.evaluator.rules), default=timedelta(minutes=5))
        await self.log.wait_until_there()
        target = await self.log.last_seq()
        follower = asyncio.create_task(self._follow(datetime.now(timezone.utc) - longest - timedelta(seconds=5),
                                                    target))
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(self._poke.wait(), EVERY)
                except asyncio.TimeoutError:
                    pass
                self._poke.clear()
                if follower.done():
                    follower.result()  # a follower that died says why
                if self.caught_up:
                    self.tick(datetime.now(timezone.utc))
        finally:
            follower.cancel()
            self._poke.set()
            await asyncio.wait([follower, *self._sending], timeout=10)

    async def _follow(self, since: datetime, target: int) -> None:
        self.caught_up = target == 0
        if self.caught_up:
            log.info("following the event log live (empty so far)")
        async for seq, event in self.log.follow(since):
            self.applied = seq
            if event is not None:
                self.evaluator.apply(event)
                if observations(event):
                    self._poke.set()
                if self.metrics is not None and seq > target:  # counters start with the process
                    self.metrics.observe(event)
                    self.metrics.lag.set(value=max(0.0, (datetime.now(timezone.utc) - event.time).total_seconds()))
            if not self.caught_up and seq >= target:
                self.caught_up = True
                log.info("following the event log live (caught up at %d)", seq)

    def tick(self, now: datetime) -> list[Notice]:
        self._reload_rules()
        notices = self.evaluator.evaluate(now)
        for notice in notices:
            log.info("%s", notice.text)
            self.sent_json = (self.sent_json + [{**notice.to_json(), "time": now.isoformat()}])[-KEPT:]
            task = asyncio.create_task(self._send(notice))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        if notices:
            self._save()
        if self.metrics is not None:
            seen = self.evaluator.collector_seen
            self.metrics.collector_up.set(value=1 if seen is not None and now - seen <= COLLECTOR_UP_WITHIN else 0)
            self.metrics.firing.clear()
            severities = {r.name: r.severity for r in self.evaluator.rules}
            for rule, _ in self.evaluator.firing:
                self.metrics.firing.inc(rule, severities.get(rule, "warning"))
        return notices

    async def _send(self, notice: Notice) -> None:
        try:
            await self.notifier.send(notice)
        finally:
            self._save()

    def _record(self, attempt: Attempt) -> None:
        """Each delivery attempt, as it ends, for the Alerts page (concurrent sends each add their own)."""
        self.deliveries = (self.deliveries + [{**attempt.__dict__, "time": attempt.time.isoformat()}])[-KEPT:]

    def _reload_rules(self) -> None:
        if self.rules_file is None or not self.rules_file.exists():
            return
        stamp = self.rules_file.stat().st_mtime_ns
        if stamp == self._rules_stamp:
            return
        self._rules_stamp = stamp
        try:
            rules = load_rules(self.rules_file)
        except (ValueError, OSError) as e:
            self.rules_problem = f"{self.rules_file}: {e}"
            log.warning("rules not reloaded, the old ones stay: %s", self.rules_problem)
            self._save()
            return
        names = {rule.name for rule in rules}
        self.evaluator.rules = rules
        self.evaluator.firing = {key: f for key, f in self.evaluator.firing.items() if key[0] in names}
        self.rules_problem = None
        log.info("rules reloaded from %s: %d rules", self.rules_file, len(rules))
        self._save()

    def _save(self) -> None:
        """The state file: what fires (restored after a restart), and for the Alerts page what was
        sent, every delivery attempt and a rules file that was refused."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self.state_path.parent, prefix=".alerts-state-")
        with os.fdopen(fd, "w") as f:
            json.dump({"firing": self.evaluator.state(), "notices": self.sent_json, "deliveries": self.deliveries,
                       "rules_problem": self.rules_problem}, f)
        os.replace(temp, self.state_path)
