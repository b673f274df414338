"""A node's maintenance from the API (and so from MCP): a drain or a restart is a job, as long as the
Maintenance page's (minutes: a batch timeout watched on each stream, a node waited for), run through
the same command and audit (console.maintain); POST starts it, GET reads its progress line by line and
what it moved, and the loss ledger's verdict once read. A restart runs the command the console was
started with (--restart-command), never one a caller gives. A job is its caller's; a refusal of the
caller's role is answered at once (403, audited), one of the server or of the lease in the job."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from console.actions import Actions
from console.api.callers import Caller
from console.api.context import SYSTEM, Context
from console.api.job_store import JobStore, OwnedJob
from console.api.models import JOB, NODE
from console.api.problems import ERRORS, Problem
from console.commands import DrainNode, RestartNodes
from console.domain.audit import Outcome
from console.domain.maintenance import NotANode, node_name
from console.errors import ConfigError
from console.maintain import MaintenanceDone, drain_node, restart_node

KEPT = 20  # jobs kept, of every caller: the oldest ended of the caller with the most go first
KEPT_FOR = 3600.0  # seconds an ended job is kept for its caller to read
LINES = 500  # progress lines a job keeps (its newest)
State = Literal["running", "done", "failed", "refused"]


class MaintenanceJobOut(BaseModel):
    id: str
    action: Literal["maintain.drain", "maintain.restart"]
    node: str
    state: State
    detail: str = ""
    lines: list[str]
    result: list[dict[str, Any]]
    evacuated: list[dict[str, Any]] = []
    ledger: dict[str, Any] | None


@dataclass
class MaintenanceJob(OwnedJob):
    action: Literal["maintain.drain", "maintain.restart"] = "maintain.drain"
    node: str = ""
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=LINES))
    result: list[dict[str, Any]] = field(default_factory=list)
    evacuated: list[dict[str, Any]] = field(default_factory=list)
    ledger: dict[str, Any] | None = None
    state: State = "running"
    detail: str = ""
    task: asyncio.Task[None] | None = None

    def out(self, job_id: str) -> MaintenanceJobOut:
        return MaintenanceJobOut(id=job_id, action=self.action, node=self.node, state=self.state, detail=self.detail,
                                 lines=list(self.lines), result=self.result, evacuated=self.evacuated,
                                 ledger=self.ledger)


class MaintenanceJobs:
    def __init__(self) -> None:
        self._jobs: JobStore[MaintenanceJob] = JobStore(KEPT_FOR, KEPT)

    def start(self, job: MaintenanceJob, run: Callable[[Callable[[str], None]], Awaitable[MaintenanceDone]]) -> str:
        job_id = self._jobs.add(job)

        async def go() -> None:
            try:
                done = await run(job.lines.append)
                job.result = [r.to_dict() for r in done.steps]
                job.evacuated = [e.to_dict() for e in done.evacuated]
                job.ledger = done.verdict.to_dict() if done.verdict is not None else None
                ended_well = [r.error is None for r in done.steps] + [e.error is None for e in done.evacuated]
                job.state = "done" if all(ended_well) else "failed"
            except Exception as e:  # refused by the lease, the server, the plan: said in the job
                job.state, job.detail = "refused", (str(e) or type(e).__name__)[:500]
            finally:
                job.ended_at = time.monotonic()

        job.task = asyncio.create_task(go(), name=f"api {job.action} {job.node}")
        return job_id

    def of(self, owner: str, job_id: str) -> MaintenanceJob | None:
        return self._jobs.of(owner, job_id)


def maintenance(ctx: Context) -> APIRouter:
    api = APIRouter(responses=ERRORS)
    jobs = MaintenanceJobs()

    async def allowed(who: Caller, actions: Actions, command: type[DrainNode] | type[RestartNodes], node: str) -> None:
        """A role that may not take the action is refused now (403), audited; so is one limited to some
        streams (a node's maintenance moves every stream on it)."""
        why = actions.allowed(command) or (
            "a node's maintenance moves every stream it leads: its role sees some streams only"
            if who.sight.limit else None)
        if why is not None:
            await actions.note(command.name, node, Outcome.ROLE if not actions.read_only else Outcome.READ_ONLY,
                               f"{why} (user {who.actor.user})")
            raise Problem(403, "Forbidden", f"{command.name} refused: {why}"[:300])

    def named(node: str) -> str:
        try:
            return node_name(node)
        except NotANode as e:  # within the path's pattern, and still a name no server has (a character not printable)
            raise Problem(404, "No such server", str(e)[:200]) from None

    @api.post("/maintenance/{node}/drain", response_model=MaintenanceJobOut, status_code=202, tags=["maintenance"])
    async def drain_node_job(node: NODE, who: Caller = ctx.caller, system: str | None = SYSTEM,
                             evacuate: bool = Query(False, description="also move the server's replicas to others "
                                                    "(nats-server 2.15), as `maintain drain --evacuate`")
                             ) -> MaintenanceJobOut:
        """The action maintain.drain as a job, as `batch-console maintain drain NODE`: every leadership moved off
        the server between batches, under the lease; read its progress and the ledger's verdict with GET
        /maintenance/jobs/{id}. An admin's action; refused in read-only mode."""
        runtime = ctx.runtime_of(system)
        actions = who.actions(runtime)
        await allowed(who, actions, DrainNode, node[:128])
        node = named(node)
        job = MaintenanceJob(who.owns, action="maintain.drain", node=node)
        job_id = jobs.start(job, lambda said: drain_node(runtime, actions, node, said, evacuate))
        return job.out(job_id)

    @api.post("/maintenance/{node}/restart", response_model=MaintenanceJobOut, status_code=202, tags=["maintenance"])
    async def restart_node_job(node: NODE, who: Caller = ctx.caller,
                               system: str | None = SYSTEM) -> MaintenanceJobOut:
        """The action maintain.restart as a job: the server drained, the command the console was started with
        (--restart-command; never one given here) run, the server waited for until it is back. 409 when
        the console has no such command. Read it with GET /maintenance/jobs/{id}."""
        runtime = ctx.runtime_of(system)
        actions = who.actions(runtime)
        await allowed(who, actions, RestartNodes, node[:128])
        node = named(node)
        if not runtime.settings.web.restart_command:
            raise Problem(409, "No restart command", str(ConfigError(
                "the console was started without --restart-command: it restarts no node")))
        job = MaintenanceJob(who.owns, action="maintain.restart", node=node)
        job_id = jobs.start(job, lambda said: restart_node(runtime, actions, node, said))
        return job.out(job_id)

    @api.get("/maintenance/jobs/{job_id}", response_model=MaintenanceJobOut, tags=["maintenance"])
    async def maintenance_job(job_id: JOB, who: Caller = ctx.caller) -> MaintenanceJobOut:
        """A drain's or a restart's progress, its moves or restarts, and the loss ledger's verdict once read."""
        job = jobs.of(who.owns, job_id)
        if job is None:  # another caller's: as if there were none
            raise Problem(404, "No such job", "no maintenance of this caller has this id")
        return job.out(job_id)

    return api
