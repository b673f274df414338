"""Where the alert rules are read from (the file given, the one the Alerts page saved, the shipped
one) and the shipped rules' remedies: light to import, for the commands that only need the text."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from console.domain.alert_rules import Rule, parse_rules
from console.domain.notify_targets import NotifyTargets

DEFAULT_RULES = Path(__file__).parent / "default_rules.toml"
RULES_FILE = "alert-rules.toml"  # in the data directory: the rules the Alerts page edits


def rules_path(given: str | os.PathLike[str] | None, data_dir: Path) -> Path:
    """The rules file given, else DATA_DIR/alert-rules.toml once the Alerts page has saved one, else the shipped rules."""
    if given:
        return Path(given)
    edited = data_dir / RULES_FILE
    return edited if edited.exists() else DEFAULT_RULES


def load_rules(path: str | os.PathLike[str] | None, targets: NotifyTargets = NotifyTargets()) -> list[Rule]:
    """The rules file given, else the shipped one; RulesError (with its line) for a file with an error,
    a notify target `targets` does not allow among them."""
    return parse_rules(Path(path or DEFAULT_RULES).read_text(), targets)


@functools.cache
def remedies() -> dict[tuple[str, str], str]:
    """(measure, reason) -> what to do, from the shipped rules: one text for alerts, incidents and checks."""
    found: dict[tuple[str, str], str] = {}
    for rule in load_rules(None):
        for reason in rule.reasons or ("",):
            found.setdefault((rule.when, reason), rule.remedy)
    return found
