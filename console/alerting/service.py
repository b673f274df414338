"""The alerts process: one follower of the event log (so many web processes never fire the same alert
twice) that evaluates the rules every second, sends what changes, keeps the firing state in the
console's SQLite database (a restart does not fire again) and feeds the Prometheus metrics."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from console.alerting.metrics import Metrics
from console.alerting.notify import Attempt, Notifier
from console.alerting.rules_file import load_rules
from console.broker.connection import Connection, cancelled
from console.broker.eventlog import EventLog
from console.config import EventLogSettings, file_stamp
from console.domain.alert_rules import Rule
from console.domain.budgets import BudgetStatus
from console.domain.alerting import Evaluator, Notice, observations
from console.domain.checks import RecentEvents
from console.domain.notify_targets import NotifyTargets
from console.storage.alert_state import AlertStore

log = logging.getLogger(__name__)

EVERY = 1.0  # seconds between evaluations
COLLECTOR_UP_WITHIN = timedelta(seconds=15)  # three of its status intervals


class AlertService:
    def __init__(self, nc: Connection, event_log: EventLogSettings, rules: list[Rule], store: AlertStore,
                 console_url: str | None = None, metrics: Metrics | None = None,
                 rules_file: Path | Callable[[], Path] | None = None,
                 targets: NotifyTargets = NotifyTargets(), checks_window_s: float = 0.0, system: str = ""):
        """system: of several NATS systems, the one this service watches (its rules are those that cover it,
        its notices name it)."""
        self.system = system
        self.log = EventLog.over(nc, event_log)
        self.evaluator = Evaluator(self._covering(rules))
        self.recent = RecentEvents(checks_window_s)  # what the health checks count, kept as it is followed
        self.targets = targets
        self.notifier = Notifier(nc, console_url, on_attempt=self._record, targets=targets)
        self.store = store
        self.metrics = metrics
        self.applied = 0  # the last event-log sequence applied
        self.caught_up = False
        self._sending: set[asyncio.Task[Any]] = set()
        self._poke = asyncio.Event()  # set when an event may fire a rule: evaluated at once, not on the clock
        # Read again when it changes, and looked for again each time: the Alerts page's first save makes
        # DATA_DIR/alert-rules.toml, which from then on is the file (a mute did nothing until a restart)
        self._rules_file = rules_file
        self._rules_stamp = file_stamp(self.rules_file)
        self.evaluator.restore(store.firing())
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="alert-state")
        self._writes: set[asyncio.Future[Any]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        longest = max(max((r.within for r in self.evaluator.rules), default=timedelta(minutes=5)),
                      timedelta(seconds=self.recent.keep_for_s))  # the health checks count their window too
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
            await cancelled(follower)
            self._poke.set()
            if self._sending:
                await asyncio.wait(list(self._sending), timeout=10)
            if self._writes:
                await asyncio.wait(list(self._writes), timeout=10)

    async def _follow(self, since: datetime, target: int) -> None:
        self.caught_up = target == 0
        if self.caught_up:
            log.info("following the event log live (empty so far)")
        async for seq, event in self.log.follow(since):
            self.applied = seq
            if event is not None:
                self.evaluator.apply(event)
                self.recent.add(event)
                if observations(event):
                    self._poke.set()
                if self.metrics is not None and seq > target:  # counters start with the process
                    self.metrics.observe(event)
                    self.metrics.lag.set(value=max(0.0, (datetime.now(timezone.utc) - event.time).total_seconds()))
            if not self.caught_up and seq >= target:
                self.caught_up = True
                log.info("following the event log live (caught up at %d)", seq)

    def set_findings(self, found: list[dict[str, str]]) -> None:
        """The health checks' last evaluation (console.checks.watch): rules on findings fire on it at once."""
        self.evaluator.set_findings(found)
        self._poke.set()

    def set_consumers(self, judged: list[Any]) -> None:
        """Every consumer's last judgement (console.checks.watch): rules on consumer lag fire on it at once."""
        self.evaluator.set_consumers(judged)
        self._poke.set()

    def set_budgets(self, statuses: list[BudgetStatus]) -> None:
        """The loss budgets as the checks' timer last summed them: budget_burn rules fire on it at once."""
        self.evaluator.set_budgets(statuses)
        if self.metrics is not None:
            self.metrics.budgets(statuses)
        self._poke.set()

    def tick(self, now: datetime) -> list[Notice]:
        self._reload_rules()
        firing_before = set(self.evaluator.firing)
        notices = self.evaluator.evaluate(now)
        if self.system:
            notices = [replace(n, system=self.system) for n in notices]
        for notice in notices:
            log.info("%s", notice.text)
            task = asyncio.create_task(self.notifier.send(notice))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        if notices or set(self.evaluator.firing) != firing_before:  # snapshots taken here, written by the writer thread
            self._write(self._keep, [json.dumps(n.to_json(self.notifier.link(n))) for n in notices], now,
                        self.evaluator.state())
        if self.metrics is not None:
            seen = self.evaluator.collector_seen
            self.metrics.collector_up.set(value=1 if seen is not None and now - seen <= COLLECTOR_UP_WITHIN else 0)
            self.metrics.firing.clear()
            severities = {r.name: r.severity for r in self.evaluator.rules}
            for rule, _ in self.evaluator.firing:
                self.metrics.firing.inc(rule, severities.get(rule, "warning"))
        return notices

    def _keep(self, bodies: list[str], now: datetime, firing: dict[tuple[str, str], tuple[datetime, datetime]]) -> None:
        for body in bodies:
            self.store.add_notice(now, body)
        self.store.save_firing(firing)

    def _record(self, attempt: Attempt) -> None:
        """Each delivery attempt, as it ends, for the Alerts page (concurrent sends each add their own)."""
        self._write(self.store.add_delivery, **attempt.__dict__)

    def _write(self, what: Any, *args: Any, **kwargs: Any) -> None:
        """SQLite writes, in order, off the event loop: a commit's fsync never delays a notice."""
        future = asyncio.get_running_loop().run_in_executor(self._writer, functools.partial(what, *args, **kwargs))
        self._writes.add(future)
        future.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[Any]) -> None:
        self._writes.discard(future)
        if not future.cancelled() and (error := future.exception()) is not None:
            log.error("alert state not kept in %s: %r", self.store.path, error)

    def _covering(self, rules: list[Rule]) -> list[Rule]:
        return [rule for rule in rules if rule.covers_system(self.system)] if self.system else rules

    @property
    def rules_file(self) -> Path | None:
        return self._rules_file() if callable(self._rules_file) else self._rules_file

    def _reload_rules(self) -> None:
        stamp = file_stamp(self.rules_file)
        if stamp is None or stamp == self._rules_stamp:
            return
        self._rules_stamp = stamp
        try:
            rules = load_rules(self.rules_file, self.targets)
        except (ValueError, OSError) as e:
            problem = f"{self.rules_file}: {e}"
            log.warning("rules not reloaded, the old ones stay: %s", problem)
            self._write(self.store.set_problem, problem)
            return
        rules = self._covering(rules)
        names = {rule.name for rule in rules}
        self.evaluator.rules = rules
        self.evaluator.firing = {key: f for key, f in self.evaluator.firing.items() if key[0] in names}
        log.info("rules reloaded from %s: %d rules", self.rules_file, len(rules))
        self._write(self.store.set_problem, None)
        self._write(self.store.save_firing, self.evaluator.state())
