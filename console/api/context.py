"""What every route of the API shares: the fleet, the caller dependency, and the steps that turn a
system, a stream, a batch id or an action's failure into an answer or a problem."""

from __future__ import annotations

from typing import Any, Awaitable, TypeVar

from fastapi import Depends, Query

from console.api.callers import Caller, Callers
from console.api.problems import Problem
from console.broker import names
from console.domain.audit import Outcome
from console.domain.incident import Incident
from console.domain.kept_messages import ShownMessage
from console.domain.stream_settings import StreamBatchSettings
from console.errors import AuditRefused, ConsoleError, ForbiddenError, ReadOnlyError, Refusal
from console.fleet import Fleet
from console.queries.reads import SystemReads
from console.runtime import Runtime

T = TypeVar("T")
SYSTEM = Query(default=None, max_length=64, description="a system of the systems file (default: the first)")


class Context:
    def __init__(self, fleet: Fleet, callers: Callers):
        self.fleet, self.callers = fleet, callers
        self.caller: Any = Depends(callers)  # each route's `who: Caller = ctx.caller`

    def runtime_of(self, system: str | None) -> Runtime:
        fleet = self.fleet
        name = fleet.known(system) if system else fleet.names[0]
        if name is None:
            raise Problem(404, "No such system", f"systems: {', '.join(fleet.names)}")
        runtime = fleet.runtime(name)
        if runtime is None:
            raise Problem(503, "System not reachable", f"{name}: {fleet.unreached.get(name, 'not open')}")
        return runtime

    @staticmethod
    def stream_name(name: str) -> str:
        try:
            return names.stream(name)
        except ValueError as e:  # past 255 bytes in UTF-8 (the document counts characters): no such stream can be
            raise Problem(404 if len(name) <= 255 else 422, "No such stream", str(e)[:200]) from None

    @staticmethod
    async def acting(run: Awaitable[T], what: str) -> T:
        """An action's answer, or its refusal as a problem: the server's code and text, a role, the audit."""
        try:
            return await run
        except Refusal as e:
            raise Problem(409, "The server refused", f"{e.code} [{e.err_code}] {e.description}") from None
        except (ForbiddenError, ReadOnlyError) as e:
            raise Problem(403, "Forbidden", str(e)) from None
        except AuditRefused as e:
            raise Problem(503, "Not recorded, not done", str(e)) from None
        except (ConsoleError, ValueError) as e:
            raise Problem(422, f"{what} refused", str(e)[:300]) from None

    async def one_stream(self, runtime: Runtime, name: str, who: Caller) -> StreamBatchSettings:
        """A stream's batch settings, for a caller whose roles read it (a refusal is audited)."""
        if not who.reads(name):
            await who.actions(runtime).note("stream.read", name, Outcome.ROLE,
                                            f"role {who.role} acts on other streams (user {who.actor.user})")
            raise Problem(403, "Forbidden", f"the role {who.role} may not read stream {name}")
        try:
            return (await runtime.admin.stream(name)).settings
        except Exception as e:
            raise Problem(404, "No such stream", f"{name}: {type(e).__name__}") from None

    async def incident(self, runtime: Runtime, batch_id: str, who: Caller) -> Incident:
        try:
            batch = names.batch_id(batch_id)
        except ValueError as e:
            raise Problem(422, "Not a batch id", str(e)[:200]) from None
        found = await SystemReads(runtime, who.sight).incident(batch)
        if found is None:  # another team's: as if there were none
            raise Problem(404, "No such incident", f"no loss of batch {batch} in the event log")
        return found

    @staticmethod
    def messages(runtime: Runtime, incident: Incident, who: Caller) -> list[ShownMessage]:
        """The batch's kept messages as the caller's roles see its stream's payloads."""
        return runtime.payloads(who.grants().payloads).kept(incident)

    def readable(self, who: Caller, stream: str | None) -> None:
        if not who.reads(stream):
            raise Problem(403, "Forbidden", f"the role {who.role} may not read stream {stream}")
