"""Every change the console can make to the world is an action from one registry. Pages, notebooks
and the CLI ask for actions here, never the broker or storage directly: read-only (and roles, when
they come) is checked here once, for every caller, and every attempt, accepted or refused, leaves
one record in the audit trail (console.broker.audit_log)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable, TypeVar

from console.broker.audit_log import AuditLog, AuditUnavailable
from console.domain.audit import Actor, AuditRecord
from console.domain.messages import Ack
from console.errors import ConsoleError, ReadOnlyError, Refusal

log = logging.getLogger(__name__)
T = TypeVar("T")
ROLES = ("viewer", "operator", "admin")  # each may do what the ones before it may


@dataclass(frozen=True)
class Action:
    name: str
    role: str  # the least role that may ask for it
    changes_server: bool  # refused in read-only mode
    records: str  # what its audit record holds beside who, when and the outcome


def message_action(kind: Ack) -> str:
    """The action an ack, nak, term or in-progress on a fetched message is."""
    return f"message.{kind.name.lower()}"


ACTIONS = {a.name: a for a in (
    Action("stream.edit", "admin", True, "the stream; each batch setting changed, before and after"),
    *(Action(message_action(kind), "operator", True, "stream/consumer and the message's stream sequence")
      for kind in Ack),
    Action("consumer.fetch", "operator", True, "stream/consumer and how many messages were asked for"),
    Action("probe.run", "operator", True, "the probe's kind, stream and size"),
    Action("alert_rule.save", "admin", True, "the rule's name"),
    Action("alert_rule.mute", "operator", True, "the rule's name"),
    Action("alert_rule.unmute", "operator", True, "the rule's name"),
    Action("export.csv", "viewer", False, "the table and the dates"),
    Action("search.run", "viewer", False, "the stream and the whole query (filter, window, expression, limits)"),
    Action("export.search", "viewer", False, "the stream, the format, how many matches and the query"),
    Action("export.report", "viewer", False, "the incident's batch"),
)}


class Actions:
    """The actions one actor (a browser session's user, a notebook, the CLI) asks for."""

    def __init__(self, audit: AuditLog | None, actor: Actor, read_only: bool = False, why_no_audit: str = "",
                 trail_required: bool = True):
        self.audit, self.actor, self.read_only = audit, actor.bounded(), read_only
        self.why_no_audit = why_no_audit  # without a trail (no event key to sign it) nothing that changes is done...
        # ...unless the actor holds the NATS credentials itself (the CLI): then it is said, not refused
        self.trail_required = trail_required
        self._pending: set[asyncio.Task] = set()

    def allowed(self, name: str) -> str | None:
        """Why this action would be refused now, or None: what a page says beside a control it turns off."""
        action = ACTIONS[name]
        if action.changes_server and self.read_only:
            return "read-only mode"
        if self.audit is None and action.changes_server and self.trail_required:
            return f"no audit trail: {self.why_no_audit}"
        return None

    async def refused(self, name: str, target: str) -> str | None:
        """Why the action would be refused (the refusal recorded), or None: for a page that refuses
        before it can build the action (a durable fetch on a read-only console opens no reader)."""
        if (why := self.allowed(name)) is not None and ACTIONS[name].changes_server and self.read_only:
            await self._record(name, target, "refused: read-only", "the console is read-only", None)
        return why

    async def run(self, name: str, target: str, do: Callable[[], Awaitable[T] | T],
                  diff: dict[str, list] | None = None) -> T:
        """Take the action (`do`) unless it is refused; one audit record either way. The error that
        refused or failed it is raised again for the caller to show."""
        action = ACTIONS[name]
        if action.changes_server and self.read_only:
            await self._record(name, target, "refused: read-only", "the console is read-only", diff)
            raise ReadOnlyError(f"read-only mode: {name} is refused")
        if self.audit is None and action.changes_server and self.trail_required:
            raise ReadOnlyError(f"{name} is refused: no audit trail ({self.why_no_audit})")
        try:
            result = do()
            if inspect.isawaitable(result):
                result = await result
        except Refusal as e:
            await self._record(name, target, "refused: server", f"{e.code} [{e.err_code}] {e.description}", diff)
            raise
        except ReadOnlyError as e:
            await self._record(name, target, "refused: read-only", str(e), diff)
            raise
        except (ConsoleError, ValueError) as e:
            await self._record(name, target, "refused: invalid", str(e), diff)
            raise
        except Exception as e:
            await self._record(name, target, "failed", repr(e), diff)
            raise
        await self._record(name, target, "accepted", "", diff)
        return result

    def recorder(self, name: str) -> Callable[[str], None]:
        """For a page's hook told of what it did on its own (a download): each call one record of `name`."""
        return lambda target: self.record_soon(name, target)

    def record_soon(self, name: str, target: str) -> None:
        """Record an action that has happened in a callback that cannot wait (a file download)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside any event loop (a script): said, never silent
            log.warning("not audited (no event loop to store it): %s %s by %s", name, target, self.actor.user)
            return
        task = loop.create_task(self.run(name, target, lambda: None))
        self._pending.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._pending.discard)

    async def _record(self, name: str, target: str, outcome: str, detail: str, diff: dict[str, list] | None) -> None:
        if self.audit is None:
            log.warning("not audited (%s): %s %s by %s: %s", self.why_no_audit, name, target, self.actor.user, outcome)
            return
        record = AuditRecord(datetime.now(timezone.utc), self.actor, name, target, outcome, detail, diff or {})
        try:
            await self.audit.append(record)
        except AuditUnavailable as e:  # the action's own outcome still reaches the caller
            log.error("audit record of %s %s by %s not stored: %s", name, target, self.actor.user, e)



def unaudited(read_only: bool) -> Actions:
    """For a view made without a runtime (a test's fake, a view built by hand): read-only refuses as
    everywhere, and nothing else that changes the world is done, since nothing would record it."""
    return Actions(None, Actor("unaudited"), read_only, "the view was given no audit trail")
