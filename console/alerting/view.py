"""What the Alerts page shows and changes: the rules (read from, and saved to, the file the alerts
process reloads) and that process's state file (what fires, what was sent, each delivery)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from console.alerting.service import RULES_FILE, STATE_FILE, load_rules, rules_path
from console.domain.alert_rules import Rule, RulesError, parse_rules, rules_toml


class AlertsView:
    def __init__(self, data_dir: Path, rules_file: str | os.PathLike | None = None):
        self.data_dir = data_dir
        self.given = Path(rules_file) if rules_file else None
        self._cache: tuple[int, dict] | None = None

    @property
    def rules_file(self) -> Path:
        return rules_path(self.given, self.data_dir)

    def rules(self) -> tuple[list[Rule], str | None]:
        """The rules, and why the file was refused (the old rules then stay in force)."""
        try:
            return load_rules(self.rules_file), self._state().get("rules_problem")
        except (ValueError, OSError) as e:
            return [], f"{self.rules_file}: {e}"

    def firing(self) -> list[tuple[str, str, str]]:
        """(rule, stream, since) of every alert firing now."""
        found = []
        for key, (since, _) in self._state().get("firing", {}).items():
            rule, _, stream = key.partition("\x1f")
            found.append((rule, stream, since))
        return sorted(found, key=lambda f: f[2], reverse=True)

    def notices(self) -> list[dict]:
        return list(reversed(self._state().get("notices", [])))

    def deliveries(self) -> list[dict]:
        return list(reversed(self._state().get("deliveries", [])))

    def save_rule(self, text: str) -> str:
        """Add a rule, or replace the one of the same name; RulesError (with its line) for a bad one."""
        found = parse_rules(text)
        if len(found) != 1:
            raise RulesError(f"give exactly one [[rule]] table, not {len(found)}")
        rule = found[0]
        rules, _ = self.rules()
        kept = [r for r in rules if r.name != rule.name]
        self._write(kept + [rule])
        return rule.name

    def set_muted(self, name: str, muted: bool) -> None:
        rules, _ = self.rules()
        self._write([replace(r, muted=muted) if r.name == name else r for r in rules])

    def _write(self, rules: list[Rule]) -> None:
        """Where the alerts process reads: the file it was given, else DATA_DIR/alert-rules.toml."""
        target = self.given or self.data_dir / RULES_FILE
        text = rules_toml(rules)
        parse_rules(text)  # what is written reads back
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".alert-rules-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temp, target)

    def _state(self) -> dict:
        """The state file, read again only when it changed (Live asks for the firing count often)."""
        path = self.data_dir / STATE_FILE
        try:
            stamp = path.stat().st_mtime_ns
            if self._cache is None or self._cache[0] != stamp:
                self._cache = (stamp, json.loads(path.read_text()))
            return self._cache[1]
        except (OSError, ValueError):
            return {}

