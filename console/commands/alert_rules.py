"""Commands on the alert rules file: save a rule, mute and unmute one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from console.commands.base import Asker, Command, Services, required


@dataclass
class SaveAlertRule(Command[str]):
    """Add a rule, or replace the one of the same name; its name."""

    name, role, changes_server = "alert_rule.save", "admin", True
    records = "the rule's name"
    text: str
    rule: str = "(not one rule)"  # its name when the text reads as one rule

    @property
    def target(self) -> str:
        return self.rule

    async def execute(self, services: Services, asker: Asker) -> str:
        return required(services.rules, "rules")().write_rule(self.text)


@dataclass
class MuteAlertRule(Command[None]):
    name, role, changes_server = "alert_rule.mute", "operator", True
    records = "the rule's name"
    rule: str
    muted: ClassVar[bool] = True

    @property
    def target(self) -> str:
        return self.rule

    async def execute(self, services: Services, asker: Asker) -> None:
        required(services.rules, "rules")().write_muted(self.rule, self.muted)


class UnmuteAlertRule(MuteAlertRule):
    name, muted = "alert_rule.unmute", False
