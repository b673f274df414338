"""The one entry for every action (console.commands): read-only mode, the user's roles
(console.domain.roles) and the end of a signed-in session are checked here once, for every caller,
and every attempt, accepted or refused, is recorded in the audit trail (console.broker.audit_log).
The record is written ahead: an action's attempt is stored before its work is done and its outcome
after, and an action whose attempt cannot be stored is refused, nothing done."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar

from console.broker.audit_log import AuditLog, AuditUnavailable
from console.commands import LEAST_ROLE, Command, Services
from console.domain.audit import Actor, AuditRecord, Outcome
from console.domain.roles import BUILT_IN, Grants, built_in_roles
from console.errors import AuditRefused, ConsoleError, ForbiddenError, ReadOnlyError, Refusal

log = logging.getLogger(__name__)
T = TypeVar("T")
assert set(LEAST_ROLE.values()) <= set(BUILT_IN)
ADMIN = Grants((built_in_roles(LEAST_ROLE)["admin"],))  # a console without roles: today's one user


class Actions:
    """The actions one actor (a browser session's user, a notebook, the CLI) asks for, with what its
    roles grant it and, for a signed-in session, when that session ends."""

    def __init__(self, audit: AuditLog | None, actor: Actor, read_only: bool = False, why_no_audit: str = "",
                 trail_required: bool = True, grants: Grants | Callable[[], Grants] = ADMIN,
                 expires: datetime | None = None, services: Services = Services()):
        self.audit, self.actor, self.read_only = audit, actor.bounded(), read_only
        self.services = services  # what commands do their work through: the writers no page holds
        self.why_no_audit = why_no_audit  # without a trail (no event key to sign it) nothing that changes is done...
        # ...unless the actor holds the NATS credentials itself (the CLI): then it is said, not refused
        self.trail_required = trail_required
        self._grants, self.expires = grants, expires

    def allowed(self, command: type[Command[Any]], stream: str | None = None) -> str | None:
        """Why this action (on `stream`) would be refused now, or None: what a page says beside a control
        it turns off. Without a stream: whether the user may take it on some stream."""
        return None if (why := self._refusal(command, stream)) is None else why[1]

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

    def _refusal(self, command: type[Command[Any]] | Command[Any], stream: str | None) -> tuple[Outcome, str] | None:
        """(the audit outcome, why) of a refusal, or None."""
        if command.changes_server and self.read_only:
            return Outcome.READ_ONLY, "read-only mode"
        if self.ended:
            return Outcome.SESSION_EXPIRED, "the session has expired: sign in again"
        if (why := self.grants.why_not(command.name, stream)) is not None:
            return Outcome.ROLE, why
        if self.audit is None and command.changes_server and self.trail_required:
            return Outcome.NO_TRAIL, f"no audit trail: {self.why_no_audit}"
        return None

    async def note(self, name: str, target: str, outcome: Outcome, detail: str) -> None:
        """A refusal that came before any command could be named (an API call without a valid token)."""
        await self._record(name, target, outcome, detail, None)

    async def _record_refusal(self, name: str, target: str, outcome: Outcome, reason: str,
                              diff: dict[str, list[Any]] | None) -> None:
        if outcome == Outcome.NO_TRAIL:
            return  # nothing to record it in
        detail = "the console is read-only" if outcome == Outcome.READ_ONLY else f"{reason} (user {self.actor.user})"
        await self._record(name, target, outcome, detail, diff)

    async def run(self, command: Command[T]) -> T:
        """Do the command's work unless it is refused; its attempt recorded before, its outcome after.
        The error that refused or failed it is raised again for the caller to show."""
        name, target, diff = command.name, command.target, command.diff()
        why = next((w for stream in (command.on_stream, *command.also_on_streams)
                    if (w := self._refusal(command, stream)) is not None), None)
        if why is not None:
            outcome, reason = why
            await self._record_refusal(name, target, outcome, reason, diff)
            if outcome == Outcome.READ_ONLY:
                raise ReadOnlyError(f"read-only mode: {name} is refused")
            if outcome == Outcome.NO_TRAIL:
                raise ReadOnlyError(f"{name} is refused: no audit trail ({self.why_no_audit})")
            raise ForbiddenError(f"{name} is refused: {reason}")
        await self._write_ahead(name, target, diff)
        try:
            result = await command.execute(self.services, self)
        except Refusal as e:
            await self._record(name, target, Outcome.SERVER, f"{e.code} [{e.err_code}] {e.description}", diff)
            raise
        except ReadOnlyError as e:
            await self._record(name, target, Outcome.READ_ONLY, str(e), diff)
            raise
        except (ConsoleError, ValueError) as e:
            await self._record(name, target, Outcome.INVALID, str(e), diff)
            raise
        except Exception as e:
            await self._record(name, target, Outcome.FAILED, repr(e), diff)
            raise
        await self._record(name, target, Outcome.ACCEPTED, command.said(result), diff)
        return result

    async def _write_ahead(self, name: str, target: str, diff: dict[str, list[Any]] | None) -> None:
        """The attempt stored before the action is taken; AuditRefused (nothing done) when it cannot be."""
        if self.audit is None:
            log.warning("not audited (%s): %s %s by %s", self.why_no_audit, name, target, self.actor.user)
            return
        record = AuditRecord(datetime.now(timezone.utc), self.actor, name, target, Outcome.ATTEMPTED, "", diff or {})
        try:
            await self.audit.append(record)
        except AuditUnavailable as e:
            log.error("%s %s by %s refused: its attempt could not be recorded: %s", name, target, self.actor.user, e)
            raise AuditRefused(f"{name} is refused: the audit trail cannot record it ({e})") from None

    async def _record(self, name: str, target: str, outcome: Outcome, detail: str, diff: dict[str, list[Any]] | None) -> None:
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
