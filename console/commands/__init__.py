"""Every change the console can make to the world, and every export, as one command class: its name
(what roles and the audit trail call it), the least built-in role that may ask for it, whether
read-only mode refuses it, what its audit record holds, its target, and its work, done through the
services it is given (console.actions.Actions runs it: read-only, the role and the session checked,
the attempt stored before the work and the outcome after).

A new action is one class in the module of its kind (and its test): the registry, the roles, the audit trail and the
pages' refusals follow from it. Pages and notebooks hold commands and read-only services; the
writers (stream administration, the NATS connection a probe publishes on, the alert rules file, the
search runner) are the services' alone."""

from __future__ import annotations

from console.commands.base import (
    Asker, COMMANDS, Command, MAX_TARGET, RuleWriter, Searcher, Services, bounded, required
)
from console.commands.servers import DrainNode, EditStream, RestartNodes, RunCanary, RunProbe
from console.commands.messages import (
    ANSWERS, AckMessage, AnswerMessage, FetchMessages, InProgressMessage, NakMessage, PublishMessage, RepublishKept,
    RepublishMessages, TermMessage
)
from console.commands.consumers import (
    ConsumerCommand, DeleteConsumer, PauseConsumer, ResetConsumer, ResumeConsumer, UnpinConsumer
)
from console.commands.alert_rules import MuteAlertRule, SaveAlertRule, UnmuteAlertRule
from console.commands.exports import ExportReport, ExportSearch, ExportTable, RunSearch, as_file

__all__ = [
    "LEAST_ROLE", "ANSWERS", "AckMessage", "AnswerMessage", "Asker", "COMMANDS", "Command", "ConsumerCommand",
    "DeleteConsumer", "DrainNode", "EditStream", "ExportReport", "ExportSearch", "ExportTable", "FetchMessages",
    "InProgressMessage", "MAX_TARGET", "MuteAlertRule", "NakMessage", "PauseConsumer", "PublishMessage",
    "RepublishKept", "RepublishMessages", "ResetConsumer", "RestartNodes", "ResumeConsumer", "RuleWriter",
    "RunCanary", "RunProbe", "RunSearch", "SaveAlertRule", "Searcher", "Services", "TermMessage", "UnmuteAlertRule",
    "UnpinConsumer", "as_file", "bounded", "required"]

LEAST_ROLE = {name: cls.role for name, cls in COMMANDS.items()}
