"""Every change the console can make to the world is an action from one registry. Pages, notebooks
and the CLI ask for actions here, never the broker or storage directly: read-only mode, the user's
roles (console.domain.roles) and the end of a signed-in session are checked here once, for every
caller, and every attempt, accepted or refused, is recorded in the audit trail
(console.broker.audit_log). The record is written ahead: an action's attempt is stored before it is
taken and its outcome after, and an action whose attempt cannot be stored is refused, nothing done."""

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
from console.domain.roles import BUILT_IN, Grants, built_in_roles
from console.errors import AuditRefused, ConsoleError, ForbiddenError, ReadOnlyError, Refusal

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Action:
    name: str
    role: str  # the least built-in role that may ask for it (console.domain.roles.BUILT_IN)
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
LEAST_ROLE = {a.name: a.role for a in ACTIONS.values()}
assert set(LEAST_ROLE.values()) <= set(BUILT_IN)
ADMIN = Grants((built_in_roles(LEAST_ROLE)["admin"],))  # a console without roles: today's one user


class Actions:
    """The actions one actor (a browser session's user, a notebook, the CLI) asks for, with what its
    roles grant it and, for a signed-in session, when that session ends."""

    def __init__(self, audit: AuditLog | None, actor: Actor, read_only: bool = False, why_no_audit: str = "",
                 trail_required: bool = True, grants: Grants | Callable[[], Grants] = ADMIN,
                 expires: datetime | None = None):
        self.audit, self.actor, self.read_only = audit, actor.bounded(), read_only
        self.why_no_audit = why_no_audit  # without a trail (no event key to sign it) nothing that changes is done...
        # ...unless the actor holds the NATS credentials itself (the CLI): then it is said, not refused
        self.trail_required = trail_required
        self._grants, self.expires = grants, expires
        self._pending: set[asyncio.Task] = set()

    def allowed(self, name: str, stream: str | None = None) -> str | None:
        """Why this action (on `stream`) would be refused now, or None: what a page says beside a control
        it turns off. Without a stream: whether the user may take it on some stream."""
        return None if (why := self._refusal(name, stream)) is None else why[1]

    @property
    def grants(self) -> Grants:
        """What the actor's roles allow now (a callable given: the roles file as it is now)."""
        return self._grants() if callable(self._grants) else self._grants

    @property
    def ended(self) -> bool:
        """The signed-in session this actor acts for has ended: what it started stops."""
        return self.expires is not None and datetime.now(timezone.utc) >= self.expires

    def payloads(self, stream: str) -> str:
        """What this user may see of `stream`'s payloads (console.domain.roles: full, masked or none)."""
        return self.grants.payloads(stream)

    def _refusal(self, name: str, stream: str | None) -> tuple[str, str] | None:
        """(the audit outcome, why) of a refusal, or None."""
        action = ACTIONS[name]
        if action.changes_server and self.read_only:
            return "refused: read-only", "read-only mode"
        if self.ended:
            return "refused: session expired", "the session has expired: sign in again"
        if (why := self.grants.why_not(name, stream)) is not None:
            return "refused: role", why
        if self.audit is None and action.changes_server and self.trail_required:
            return "refused: no trail", f"no audit trail: {self.why_no_audit}"
        return None

    async def refused(self, name: str, target: str, stream: str | None = None) -> str | None:
        """Why the action would be refused (the refusal recorded), or None: for a page that refuses
        before it can build the action (a durable fetch on a read-only console opens no reader)."""
        if (why := self._refusal(name, stream)) is None:
            return None
        await self._record_refusal(name, target, *why, None)
        return why[1]

    async def _record_refusal(self, name: str, target: str, outcome: str, reason: str,
                              diff: dict[str, list] | None) -> None:
        if outcome == "refused: no trail":
            return  # nothing to record it in
        detail = "the console is read-only" if outcome == "refused: read-only" else f"{reason} (user {self.actor.user})"
        await self._record(name, target, outcome, detail, diff)

    async def run(self, name: str, target: str, do: Callable[[], Awaitable[T] | T],
                  diff: dict[str, list] | None = None, stream: str | None = None) -> T:
        """Take the action (`do`) on `stream` (None: it acts on none) unless it is refused; one audit
        record either way. The error that refused or failed it is raised again for the caller to show."""
        if (why := self._refusal(name, stream)) is not None:
            outcome, reason = why
            await self._record_refusal(name, target, outcome, reason, diff)
            if outcome == "refused: read-only":
                raise ReadOnlyError(f"read-only mode: {name} is refused")
            if outcome == "refused: no trail":
                raise ReadOnlyError(f"{name} is refused: no audit trail ({self.why_no_audit})")
            raise ForbiddenError(f"{name} is refused: {reason}")
        await self._write_ahead(name, target, diff)
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

    def recorder(self, name: str) -> Callable[..., Awaitable[str | None]]:
        """For a page's hook asked before it does something on its own (a download): async (target,
        stream=None) -> why it is refused (recorded when it can be), or None: the attempt is stored, the
        page goes on, and the outcome is stored soon after."""
        return lambda target, stream=None: self.attempt(name, target, stream)

    async def attempt(self, name: str, target: str, stream: str | None = None) -> str | None:
        if (why := self._refusal(name, stream)) is not None:
            await self._record_refusal(name, target, *why, None)
            return why[1]
        try:
            await self._write_ahead(name, target, None)
        except AuditRefused as e:
            return str(e)
        task = asyncio.get_running_loop().create_task(self._record(name, target, "accepted", "", None))
        self._pending.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._pending.discard)
        return None

    async def _write_ahead(self, name: str, target: str, diff: dict[str, list] | None) -> None:
        """The attempt stored before the action is taken; AuditRefused (nothing done) when it cannot be."""
        if self.audit is None:
            log.warning("not audited (%s): %s %s by %s", self.why_no_audit, name, target, self.actor.user)
            return
        record = AuditRecord(datetime.now(timezone.utc), self.actor, name, target, "attempted", "", diff or {})
        try:
            await self.audit.append(record)
        except AuditUnavailable as e:
            log.error("%s %s by %s refused: its attempt could not be recorded: %s", name, target, self.actor.user, e)
            raise AuditRefused(f"{name} is refused: the audit trail cannot record it ({e})") from None

    async def _record(self, name: str, target: str, outcome: str, detail: str, diff: dict[str, list] | None) -> None:
        if self.audit is None:
            log.warning("not audited (%s): %s %s by %s: %s", self.why_no_audit, name, target, self.actor.user, outcome)
            return
        record = AuditRecord(datetime.now(timezone.utc), self.actor, name, target, outcome, detail, diff or {})
        try:
            await self.audit.append(record)
        except AuditUnavailable as e:  # the outcome still reaches the caller; the trail holds its attempt
            log.error("audit record of %s %s by %s (%s) not stored: %s", name, target, self.actor.user, outcome, e)



def unaudited(read_only: bool) -> Actions:
    """For a view made without a runtime (a test's fake, a view built by hand): read-only refuses as
    everywhere, and nothing else that changes the world is done, since nothing would record it."""
    return Actions(None, Actor("unaudited"), read_only, "the view was given no audit trail")
