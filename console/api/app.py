"""/api/v1: the console for scripts, runbooks and assistants, served by `batch-console serve` beside the
pages (console/api/bridge.py). FastAPI makes the OpenAPI document from the models below, which are the
pages' own dataclasses where a page reads one (StreamBatchSettings, Finding). Every call names a token
(`Authorization: Bearer`, console/api/tokens.py); its role is the roles file's, as a signed-in user's;
every action goes through the same actions as a page (console.actions: one role check, one write-ahead
audit record naming the token); every refusal is audited; errors are RFC 9457 problem details."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import Match

from console.actions import Actions
from console.api.jobs import Jobs, SearchIn, SearchOut
from console.api.tokens import ApiToken, TokenStore
from console.broker import names
from console.commands import EditStream, MuteAlertRule, UnmuteAlertRule
from console.domain.audit import Actor
from console.domain.checks import Finding
from console.domain.roles import Grants
from console.domain.search import SearchQuery
from console.domain.wire import EARLIEST
from console.domain.stream_settings import StreamBatchSettings, diff_settings
from console.errors import AuditRefused, ConsoleError, ForbiddenError, ReadOnlyError, Refusal
from console.fleet import Fleet
from console.runtime import Runtime

PROBLEM = "application/problem+json"
MAX_PAGE = 1000
API = "/api/v1"


class Problem(Exception):
    """An RFC 9457 problem: the status, a short title and what happened."""

    def __init__(self, status: int, title: str, detail: str = ""):
        super().__init__(detail or title)
        self.status, self.title, self.detail = status, title, detail


def _problem(status: int, title: str, detail: str, instance: str) -> JSONResponse:
    return JSONResponse({"type": "about:blank", "title": title, "status": status, "detail": detail[:1000],
                         "instance": instance[:300]}, status_code=status, media_type=PROBLEM,
                        headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


def _rfc3339(value: object) -> object:
    """A time as RFC 3339 writes it, and nothing else (not a number of seconds, not a bare date)."""
    if not isinstance(value, str) or len(value) > 64 or "T" not in value.upper():
        raise ValueError("a time as RFC 3339 writes it: 2026-11-27T10:00:00Z")
    try:
        return datetime.fromisoformat(value.upper().replace(":60", ":59"))  # a leap second, one earlier
    except ValueError:
        raise ValueError("a time as RFC 3339 writes it: 2026-11-27T10:00:00Z") from None


Time = Annotated[datetime, BeforeValidator(_rfc3339)]
# What the server takes as a stream name (console/domain/wire.py), and a batch id: as the document says
STREAM = Annotated[str, Path(pattern=r"^[^\x00-\x20\x7f.*>/\\]+$", max_length=255)]
BATCH = Annotated[str, Path(pattern=r"^[^\x00-\x1f\x7f]+$", max_length=64)]
RULE = Annotated[str, Path(pattern=r"^[^\x00-\x1f\x7f]+$", max_length=200)]
JOB = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{16}$")]  # a search's id (console/api/jobs.py)


class ProblemOut(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str = ""
    instance: str = ""


ERRORS: dict[int | str, dict] = {code: {"model": ProblemOut, "content": {PROBLEM: {}}}
                                 for code in (400, 401, 403, 404, 405, 409, 413, 422, 429, 503)}


class SystemOut(BaseModel):
    name: str
    reachable: bool
    why: str | None = None


class LossOut(BaseModel):
    time: datetime
    system: str
    stream: str | None
    batch_id: str | None
    reason: str
    kind: Literal["atomic", "fast"]
    publisher: str | None = None
    unverified: bool = False
    cluster: str | None = None


class LossesPage(BaseModel):
    items: list[LossOut]
    total: int
    limit: int
    offset: int


class BatchSettingsPatch(BaseModel):
    """The batch settings to change; those left out stay as they are."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "yes" is not true: a script says what it means
    allow_atomic: bool | None = None
    allow_batched: bool | None = None
    persist_mode: Literal["default", "async"] | None = None


class ChecksOut(BaseModel):
    status: str
    evaluated: datetime | None
    findings: list[Finding]
    unchecked: list[dict[str, str]]


class RuleOut(BaseModel):
    name: str
    when: str
    severity: str
    muted: bool
    streams: list[str]
    systems: list[str]


class AuditRecordOut(BaseModel):
    seq: int
    time: datetime
    user: str
    address: str
    action: str
    target: str
    outcome: str
    detail: str


class AuditOut(BaseModel):
    intact: bool
    breaks: list[str]
    records: list[AuditRecordOut]


class HealthOut(BaseModel):
    system: str
    connection: str
    collector: str
    event_key_problem: str | None
    last_event_seconds_ago: float | None
    events_skipped: int


@dataclass
class Caller:
    """Who calls: the token, and the actor its audit records name."""

    token: ApiToken
    actor: Actor

    def actions(self, fleet: Fleet, runtime: Runtime) -> Actions:
        role = self.token.role
        return runtime.actions(self.actor, lambda: fleet.roles().grants(role), self.token.expiry)

    def reads(self, fleet: Fleet, stream: str | None) -> bool:
        """Whether its role acts on this stream (a role limited to TEAM_* reads nothing of another);
        what concerns no stream, every role reads."""
        return stream is None or any(r.acts_on(stream) for r in fleet.roles().grants(self.token.role).roles)


class Buckets:
    """A token bucket per token: its rate sustained, twice its rate at once."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, name: str, rate: float) -> bool:
        now = time.monotonic()
        burst = 2 * rate
        level, at = self._buckets.get(name, (burst, now))
        level = min(burst, level + (now - at) * rate)
        if level < 1.0:
            self._buckets[name] = (level, now)
            return False
        self._buckets[name] = (level - 1.0, now)
        return True


def make_api(fleet: Fleet, tokens: TokenStore) -> FastAPI:
    api = FastAPI(title="JetStream Batch Console API", version="1", openapi_url=f"{API}/openapi.json", docs_url=None,
                  redoc_url=None, description=__doc__)
    buckets = Buckets()

    @api.exception_handler(Problem)
    async def on_problem(request: Request, e: Problem) -> JSONResponse:
        return _problem(e.status, e.title, e.detail, request.url.path)

    @api.exception_handler(HTTPException)
    async def on_http(request: Request, e: HTTPException) -> JSONResponse:
        answer = _problem(e.status_code, str(e.detail), "", request.url.path)
        for key, value in (e.headers or {}).items():
            answer.headers[key] = value
        if e.status_code == 405:  # every method the document gives this path, not only its first route's
            allowed = {m for route in api.routes if isinstance(route, APIRoute)
                       and route.matches(request.scope)[0] is not Match.NONE for m in route.methods or ()}
            answer.headers["Allow"] = ", ".join(sorted(allowed))
        return answer

    @api.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        said = "; ".join(f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', '')}" for err in e.errors()[:5])
        return _problem(422, "Invalid request", said, request.url.path)

    async def refuse(request: Request, who: str, why: str, status: int = 401) -> Problem:
        """The refusal, in the first system's audit trail (an unknown caller acts on no system yet)."""
        runtime = fleet.runtime()
        if runtime is not None:
            actor = Actor(who, request.client.host if request.client else "", request.headers.get("user-agent", ""))
            await runtime.actions(actor, Grants(())).note(f"api {request.method}", request.url.path,
                                                          "refused: unauthenticated", why)
        return Problem(status, "Unauthorized" if status == 401 else "Too many requests", why)

    async def caller(request: Request) -> Caller:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise await refuse(request, "api (no token)", "no bearer token")
        found = tokens.find(token.strip())
        if found is None:
            raise await refuse(request, "api (unknown token)", "not a token of this console")
        now = datetime.now(timezone.utc)
        if found.revoked is not None:
            raise await refuse(request, f"token:{found.name}", f"token {found.name} revoked at {found.revoked}")
        if found.expired(now):
            raise await refuse(request, f"token:{found.name}", f"token {found.name} expired at {found.expires}")
        if not buckets.take(found.name, found.rate):
            raise Problem(429, "Too many requests", f"token {found.name}: at most {found.rate:g} requests a second")
        agent = request.headers.get("user-agent", "")
        return Caller(found, Actor(f"token:{found.name}", request.client.host if request.client else "", agent))

    def runtime_of(system: str | None) -> Runtime:
        name = fleet.known(system) if system else fleet.names[0]
        if name is None:
            raise Problem(404, "No such system", f"systems: {', '.join(fleet.names)}")
        runtime = fleet.runtime(name)
        if runtime is None:
            raise Problem(503, "System not reachable", f"{name}: {fleet.unreached.get(name, 'not open')}")
        return runtime

    def stream_name(name: str) -> str:
        try:
            return names.stream(name)
        except ValueError as e:  # past 255 bytes in UTF-8 (the document counts characters): no such stream can be
            raise Problem(404 if len(name) <= 255 else 422, "No such stream", str(e)[:200]) from None

    async def acting(run, what: str):
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

    System = Query(default=None, max_length=64, description="a system of the systems file (default: the first)")

    @api.get(f"{API}/systems", response_model=list[SystemOut], responses=ERRORS, tags=["systems"])
    async def systems(who: Caller = Depends(caller)) -> list[SystemOut]:
        return [SystemOut(name=n, reachable=fleet.runtime(n) is not None, why=fleet.unreached.get(n))
                for n in fleet.names]

    @api.get(f"{API}/losses", response_model=LossesPage, responses=ERRORS, tags=["losses"])
    async def losses(who: Caller = Depends(caller), system: str | None = System,
                     stream: str | None = Query(None, max_length=255), reason: str | None = Query(None, max_length=64),
                     kind: Literal["atomic", "fast"] | None = None, publisher: str | None = Query(None, max_length=256),
                     since: Time | None = None, until: Time | None = None,
                     limit: int = Query(100, ge=1, le=MAX_PAGE), offset: int = Query(0, ge=0, le=1_000_000)) -> LossesPage:
        """Lost batches as Live holds them (the last hour), newest first; of every system unless one is named."""
        wanted = {system: runtime_of(system)} if system else fleet.runtimes()
        found = [b for runtime in wanted.values() for b in runtime.live.model.newest_first(limit=10_000, per_stream=50)]
        found = [b for b in found if who.reads(fleet, b.stream) and (stream is None or b.stream == stream)
                 and (reason is None or b.reason == reason)
                 and (kind is None or b.kind == kind) and (publisher is None or publisher in (b.publisher or ""))
                 and (since is None or b.time >= since) and (until is None or b.time < until)]
        found.sort(key=lambda b: b.time, reverse=True)
        items = [LossOut(time=b.time, system=b.system or fleet.names[0], stream=b.stream, batch_id=b.batch_id,
                         reason=b.reason, kind="atomic" if b.kind == "atomic" else "fast", publisher=b.publisher,
                         unverified=b.unverified, cluster=b.cluster)
                 for b in found[offset:offset + limit]]
        return LossesPage(items=items, total=len(found), limit=limit, offset=offset)

    @api.get(f"{API}/streams", response_model=list[StreamBatchSettings], responses=ERRORS, tags=["streams"])
    async def streams(who: Caller = Depends(caller), system: str | None = System) -> list[StreamBatchSettings]:
        return [s for s in await runtime_of(system).admin.streams() if who.reads(fleet, s.name)]

    @api.get(f"{API}/streams/{{name}}", response_model=StreamBatchSettings, responses=ERRORS, tags=["streams"])
    async def stream(name: STREAM, who: Caller = Depends(caller), system: str | None = System) -> StreamBatchSettings:
        runtime = runtime_of(system)
        return await _one_stream(runtime, stream_name(name), who)

    async def _one_stream(runtime: Runtime, name: str, who: Caller) -> StreamBatchSettings:
        if not who.reads(fleet, name):
            await who.actions(fleet, runtime).note("stream.read", name, "refused: role",
                                                   f"role {who.token.role} acts on other streams (user {who.actor.user})")
            raise Problem(403, "Forbidden", f"the role {who.token.role} may not read stream {name}")
        try:
            return (await runtime.admin.stream(name)).settings
        except Exception as e:
            raise Problem(404, "No such stream", f"{name}: {type(e).__name__}") from None

    @api.patch(f"{API}/streams/{{name}}", response_model=StreamBatchSettings, responses=ERRORS, tags=["streams"])
    async def edit_stream(name: STREAM, change: BatchSettingsPatch, who: Caller = Depends(caller),
                          system: str | None = System) -> StreamBatchSettings:
        """The action stream.edit: as the Streams page's Apply, audited with the token's name."""
        runtime = runtime_of(system)
        current = await _one_stream(runtime, stream_name(name), who)
        wanted = current.with_changes(**change.model_dump(exclude_none=True))
        diff = diff_settings(current, wanted)
        if not diff:
            return current
        return await acting(who.actions(fleet, runtime).run(EditStream(current.name, dict(diff))), "stream.edit")

    @api.get(f"{API}/checks", response_model=ChecksOut, responses=ERRORS, tags=["checks"])
    async def checks(who: Caller = Depends(caller), system: str | None = System) -> ChecksOut:
        """The health checks as the alerts part last evaluated them: the Checks page's findings."""
        found, when, unchecked = runtime_of(system).alerts.findings()
        findings = [Finding(f["code"], f["severity"], f["title"], f["evidence"], f["remedy"], f["stream"] or None,
                            system) for f in found if who.reads(fleet, f["stream"] or None)]
        order = ("ok", "info", "warning", "critical")
        worst = max((f.severity for f in findings), key=order.index, default="ok")
        return ChecksOut(status=worst, evaluated=when, findings=findings,
                         unchecked=[{"code": c, "why": w} for c, w in unchecked])

    @api.get(f"{API}/incidents/{{batch_id}}/report", response_class=PlainTextResponse, responses=ERRORS,
             tags=["incidents"])
    async def incident_report(batch_id: BATCH, who: Caller = Depends(caller), system: str | None = System) -> str:
        """The incident's Markdown report, as the Incident page downloads it."""
        from console.domain.incident import incident_report as report

        incident = await _incident(runtime_of(system), batch_id, who)
        return report(incident)

    @api.get(f"{API}/incidents/{{batch_id}}", responses=ERRORS, tags=["incidents"])
    async def incident(batch_id: BATCH, who: Caller = Depends(caller), system: str | None = System) -> dict:
        """One lost batch's incident: the loss, the batch's own events and what happened around it."""
        from console.domain.incident import timeline

        found = await _incident(runtime_of(system), batch_id, who)
        loss = found.loss
        return {"batch_id": loss.batch_id, "stream": loss.stream, "kind": loss.kind.value, "reason": loss.reason,
                "time": loss.time, "publisher": found.publisher.line() if found.publisher else None,
                "timeline": [{"time": t, "what": what, "detail": detail} for t, what, detail in timeline(found)],
                "folded": dict(found.folded)}

    async def _incident(runtime: Runtime, batch_id: str, who: Caller):
        try:
            batch = names.batch_id(batch_id)
        except ValueError as e:
            raise Problem(422, "Not a batch id", str(e)[:200]) from None
        found = await runtime.find_incident(batch)
        if found is None or not who.reads(fleet, found.loss.stream):  # another team's: as if there were none
            raise Problem(404, "No such incident", f"no loss of batch {batch} in the event log")
        return found

    @api.get(f"{API}/alerts/rules", response_model=list[RuleOut], responses=ERRORS, tags=["alerts"])
    async def rules(who: Caller = Depends(caller), system: str | None = System) -> list[RuleOut]:
        found, _ = runtime_of(system).alerts.rules()
        return [RuleOut(name=r.name, when=r.when, severity=r.severity, muted=r.muted, streams=list(r.streams),
                        systems=list(r.systems)) for r in found]

    @api.post(f"{API}/alerts/rules/{{name}}/mute", status_code=204, responses=ERRORS, tags=["alerts"])
    async def mute(name: RULE, who: Caller = Depends(caller), system: str | None = System) -> None:
        runtime = runtime_of(system)
        await acting(who.actions(fleet, runtime).run(MuteAlertRule(known_rule(runtime, name))), "alert_rule.mute")

    @api.post(f"{API}/alerts/rules/{{name}}/unmute", status_code=204, responses=ERRORS, tags=["alerts"])
    async def unmute(name: RULE, who: Caller = Depends(caller), system: str | None = System) -> None:
        runtime = runtime_of(system)
        await acting(who.actions(fleet, runtime).run(UnmuteAlertRule(known_rule(runtime, name))), "alert_rule.unmute")

    def known_rule(runtime: Runtime, name: str) -> str:
        if name not in {r.name for r in runtime.alerts.rules()[0]}:
            raise Problem(404, "No such rule", name[:200])
        return name

    @api.get(f"{API}/audit", response_model=AuditOut, responses=ERRORS, tags=["audit"])
    async def audit(who: Caller = Depends(caller), system: str | None = System, since: Time | None = None,
                    limit: int = Query(500, ge=1, le=MAX_PAGE)) -> AuditOut:
        """The audit trail, newest first, and whether its chain holds (`batch-console audit --verify`)."""
        runtime = runtime_of(system)
        if since is not None and since > datetime.now(timezone.utc):  # nothing yet: not a wait for the future
            return AuditOut(intact=True, breaks=[], records=[])
        if since is not None and since < EARLIEST:  # the server's start time cannot go before it (a read hung)
            since = None
        checked = await runtime.audit.read(since)
        records = [AuditRecordOut(seq=seq, time=r.time, user=r.actor.user, address=r.actor.address, action=r.action,
                                  target=r.target, outcome=r.outcome, detail=r.detail)
                   for seq, r in reversed(checked.records[-limit:])]
        return AuditOut(intact=checked.intact, breaks=[f"{seq}: {why}" for seq, why in checked.breaks], records=records)

    jobs = Jobs()

    @api.post(f"{API}/searches", response_model=SearchOut, status_code=202, responses=ERRORS, tags=["search"])
    async def start_search(search: SearchIn, who: Caller = Depends(caller), system: str | None = System) -> SearchOut:
        """A search of a stream as a job (the action search.run, its limits and masking): read it with GET."""
        runtime = runtime_of(system)
        if not who.reads(fleet, search.stream):
            raise Problem(403, "Forbidden", f"the role {who.token.role} may not read stream {search.stream}")
        try:
            query = SearchQuery(**search.model_dump())
        except ValueError as e:  # SearchRefused: the expression, a filter, a name past 255 bytes: the job says
            job_id = jobs.refused(who.token.name, f"search refused: {e}")
        else:
            job_id = jobs.start(who.token.name, query, who.actions(fleet, runtime))
        found = jobs.of(who.token.name, job_id)
        assert found is not None
        return found.out(job_id)

    @api.get(f"{API}/searches/{{job_id}}", response_model=SearchOut, responses=ERRORS, tags=["search"])
    async def read_search(job_id: JOB, who: Caller = Depends(caller)) -> SearchOut:
        found = jobs.of(who.token.name, job_id)
        if found is None:
            raise Problem(404, "No such search", "none of this token's searches has this id")
        return found.out(job_id)

    @api.delete(f"{API}/searches/{{job_id}}", status_code=204, responses=ERRORS, tags=["search"])
    async def cancel_search(job_id: JOB, who: Caller = Depends(caller)) -> None:
        found = jobs.of(who.token.name, job_id)
        if found is None:
            raise Problem(404, "No such search", "none of this token's searches has this id")
        found.cancel = True

    @api.get(f"{API}/conformance", responses=ERRORS, tags=["conformance"])
    async def conformance(who: Caller = Depends(caller), system: str | None = System) -> list[dict]:
        """Each batch publisher's verdict on ADR-50's statements, as `batch-console conformance --format json`."""
        verdicts = await runtime_of(system).verdicts()
        return [{"client": v.name, "key": v.key, "conforms": not v.failing, "failing": list(v.failing),
                 "batches": v.batches, "since": v.since, "until": v.until} for v in verdicts.report()]

    @api.get(f"{API}/history/{{table}}", responses=ERRORS, tags=["history"])
    async def history(table: Literal["abandoned_batches", "abandonments_by_hour", "abandonments_by_stream",
                                     "gaps_by_hour", "fast_outcomes", "capture_interruptions"],
                      who: Caller = Depends(caller), system: str | None = System,
                      since: Time | None = None, until: Time | None = None) -> list[dict]:
        """One of History's tables, as the History page shows and downloads it (the last week by default)."""
        reader = runtime_of(system).history
        if reader is None:
            raise Problem(404, "No history yet", "the analytics job has not written this system's tables")
        end = until or datetime.now(timezone.utc)
        start = since or end - timedelta(days=7)
        rows = json.loads(getattr(reader, table)(start, end).to_json(orient="records", date_format="iso"))
        return [r for r in rows if who.reads(fleet, r.get("stream") or None)]

    @api.get(f"{API}/health", response_model=list[HealthOut], responses=ERRORS, tags=["health"])
    async def health(who: Caller = Depends(caller)) -> list[HealthOut]:
        """Each system's connection, its collector and the event key, as the header's badges say."""
        now = datetime.now(timezone.utc)
        found = []
        for name, runtime in fleet.runtimes().items():
            state = runtime.live
            fresh = state.model.freshness(now)
            found.append(HealthOut(system=name, connection=state.connection, collector=state.model.collector_state(now),
                                   event_key_problem=state.key_problem,
                                   last_event_seconds_ago=fresh.total_seconds() if fresh is not None else None,
                                   events_skipped=state.skipped))
        return found

    return api


