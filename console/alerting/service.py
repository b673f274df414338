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
from console.alerting.notify import Notifier
from console.broker.connection import Connection
from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.alert_rules import Rule, parse_rules
from console.domain.alerting import Evaluator, Notice, observations

log = logging.getLogger(__name__)

DEFAULT_RULES = Path(__file__).parent / "default_rules.toml"
EVERY = 1.0  # seconds between evaluations
COLLECTOR_UP_WITHIN = timedelta(seconds=15)  # three of its status intervals


def load_rules(path: str | os.PathLike | None) -> list[Rule]:
    """The rules file given, else the shipped one; RulesError (with its line) for a file with an error."""
    return parse_rules(Path(path or DEFAULT_RULES).read_text())


class AlertService:
    def __init__(self, nc: Connection, event_log: EventLogSettings, rules: list[Rule], state_path: Path,
                 console_url: str | None = None, metrics: Metrics | None = None):
        self.log = EventLog(nc.jetstream(), event_log)
        self.evaluator = Evaluator(rules)
        self.notifier = Notifier(nc, console_url)
        self.state_path = state_path
        self.metrics = metrics
        self.applied = 0  # the last event-log sequence applied
        self.caught_up = False
        self.sent: list[Notice] = []  # notices sent since start (bounded), newest last
        self._sending: set[asyncio.Task] = set()
        self._poke = asyncio.Event()  # set when an event may fire a rule: evaluated at once, not on the clock
        if state_path.exists():
            self.evaluator.restore(json.loads(state_path.read_text()))

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
        notices = self.evaluator.evaluate(now)
        for notice in notices:
            log.info("%s", notice.text)
            self.sent = (self.sent + [notice])[-500:]
            task = asyncio.create_task(self.notifier.send(notice))
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

    def _save(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self.state_path.parent, prefix=".alerts-state-")
        with os.fdopen(fd, "w") as f:
            json.dump(self.evaluator.state(), f)
        os.replace(temp, self.state_path)
