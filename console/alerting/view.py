"""What the Alerts page shows and changes: the rules (read from, and saved to, the file the alerts
process reloads) and that process's state in SQLite (what fires, what was sent, each delivery)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, TypeVar

from console.actions import Actions, unaudited
from console.alerting.rules_file import RULES_FILE, load_rules, rules_path
from console.commands import MuteAlertRule, SaveAlertRule, UnmuteAlertRule
from console.domain.alert_rules import Rule, RulesError, parse_rules, rules_toml
from console.domain.notify_targets import NotifyTargets
from console.errors import ReadOnlyError
from console.storage.alert_state import AlertStore

log = logging.getLogger(__name__)
T = TypeVar("T")
FIRING_FOR = 1.0  # seconds what fires is kept before SQLite is asked again


class AlertsView:
    def __init__(self, data_dir: Path, rules_file: str | os.PathLike[str] | None, db_path: Path,
                 targets: NotifyTargets = NotifyTargets(), read_only: bool = False, actions: Actions | None = None):
        self.data_dir = data_dir
        # Every change is an action (audited, refused in read-only mode) whoever calls: a page gives its
        # session's actions, a notebook or a test calling the view directly gets these.
        self.actions = actions or unaudited(read_only)
        self.targets = targets  # where a rule may send: a rule naming another target is refused
        self.read_only = read_only  # every change refused here, whoever calls (a page, a notebook)
        self.given = Path(rules_file) if rules_file else None
        self.db_path = db_path
        self._store: AlertStore | None = None
        self._firing: tuple[float, list[Any]] | None = None  # (read at, what fires): shared by every session
        self._unreadable: str | None = None  # said once in the log, not at every refresh

    @property
    def rules_file(self) -> Path:
        return rules_path(self.given, self.data_dir)

    def rules(self) -> tuple[list[Rule], str | None]:
        """The rules, and why the file was refused (the old rules then stay in force)."""
        try:
            return load_rules(self.rules_file, self.targets), self._read(lambda store: store.problem(), None)
        except (ValueError, OSError) as e:
            return [], f"{self.rules_file}: {e}"

    def firing(self) -> list[tuple[str, str, datetime]]:
        """(rule, stream, since) of every alert firing now, newest first; read at most once a second
        (every session's header and Live's status bar ask several times a second)."""
        now = time.monotonic()
        if self._firing is None or now - self._firing[0] >= FIRING_FOR:
            firing: dict[tuple[str, str], tuple[datetime, datetime]] = self._read(lambda store: store.firing(), {})
            found = [(rule, stream, since) for (rule, stream), (since, _) in firing.items()]
            self._firing = (now, sorted(found, key=lambda f: f[2], reverse=True))
        return self._firing[1]

    def notices(self) -> list[dict[str, Any]]:
        """What was sent, newest first."""
        sent: list[tuple[datetime, str]] = self._read(lambda store: store.notices(), [])
        return [{**json.loads(body), "time": time} for time, body in sent]

    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivery attempt, newest first."""
        return self._read(lambda store: store.deliveries(), [])

    def findings(self) -> tuple[list[dict[str, Any]], datetime | None, list[tuple[str, str]]]:
        """The health checks' findings as the alerts part last stored them, when, and what it could not check."""
        nothing: tuple[list[dict[str, Any]], datetime | None, list[tuple[str, str]]] = ([], None, [])
        return self._read(lambda store: store.findings(), nothing)

    async def save_rule(self, text: str, actions: Actions | None = None) -> str:
        """Add a rule, or replace the one of the same name (the action alert_rule.save); RulesError (with
        its line) for a bad one."""
        try:
            found = parse_rules(text, self.targets)
        except RulesError:
            found = []
        command = SaveAlertRule(text, found[0].name) if len(found) == 1 else SaveAlertRule(text)
        return await (actions or self.actions).run(command)

    def write_rule(self, text: str) -> str:
        """The rules file with the rule added or replaced: SaveAlertRule's work, never a page's."""
        self._may_change("rules are not saved")
        found = parse_rules(text, self.targets)
        if len(found) != 1:
            raise RulesError(f"give exactly one [[rule]] table, not {len(found)}")
        rule = found[0]
        rules, _ = self.rules()
        kept = [r for r in rules if r.name != rule.name]
        self._write(kept + [rule])
        return rule.name

    async def set_muted(self, name: str, muted: bool, actions: Actions | None = None) -> None:
        await (actions or self.actions).run(MuteAlertRule(name) if muted else UnmuteAlertRule(name))

    def write_muted(self, name: str, muted: bool) -> None:
        """The rules file with the rule muted or unmuted: the mute commands' work, never a page's."""
        self._may_change("rules are not muted or unmuted")
        rules, _ = self.rules()
        self._write([replace(r, muted=muted) if r.name == name else r for r in rules])

    def _may_change(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"read-only mode: {what}")

    def _write(self, rules: list[Rule]) -> None:
        """Where the alerts process reads: the file it was given, else DATA_DIR/alert-rules.toml."""
        target = self.given or self.data_dir / RULES_FILE
        text = rules_toml(rules)
        parse_rules(text, self.targets)  # what is written reads back
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".alert-rules-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temp, target)

    def _read(self, query: Callable[[AlertStore], T], nothing: T) -> T:
        """What the alerts process kept; `nothing` while there is no database yet (or it cannot be read)."""
        try:
            if self._store is None:
                if not self.db_path.exists():
                    return nothing
                self._store = AlertStore(self.db_path)
            return query(self._store)
        except Exception as e:  # being made, or not a database: the page shows the rules all the same
            if (why := f"{type(e).__name__}: {e}"[:300]) != self._unreadable:
                self._unreadable = why
                log.warning("alert state not readable from %s: %s", self.db_path, why)
            return nothing


class AlertsAcross:
    """Several NATS systems' alerts as one view, for the Alerts page's "all systems": the one rules file
    (changed through the first system's view, whose audit trail records it) and each system's state,
    each row with its system."""

    several = True  # each row with its system

    def __init__(self, views: dict[str, AlertsView]):
        self.views = views
        self.first = next(iter(views.values()))
        self.read_only = self.first.read_only

    def rules(self) -> tuple[list[Rule], str | None]:
        return self.first.rules()

    def firing(self) -> list[tuple[str, str, datetime, str]]:
        found = [(rule, stream, since, name) for name, view in self.views.items() for rule, stream, since in view.firing()]
        return sorted(found, key=lambda f: f[2], reverse=True)

    def notices(self) -> list[dict[str, Any]]:
        found = [{**n, "system": n.get("system") or name} for name, view in self.views.items() for n in view.notices()]
        return sorted(found, key=lambda n: n["time"], reverse=True)

    def deliveries(self) -> list[dict[str, Any]]:
        found = [{**d, "system": name} for name, view in self.views.items() for d in view.deliveries()]
        return sorted(found, key=lambda d: d["time"], reverse=True)

    async def save_rule(self, text: str, actions: Actions | None = None) -> str:
        return await self.first.save_rule(text, actions)

    async def set_muted(self, name: str, muted: bool, actions: Actions | None = None) -> None:
        await self.first.set_muted(name, muted, actions)
