"""/api/v1: the console for scripts, runbooks and assistants, served by `batch-console serve` beside the
pages (console/api/bridge.py). FastAPI makes the OpenAPI document from the models (console/api/models.py),
which are the pages' own dataclasses where a page reads one (StreamBatchSettings, Finding). Every call
names a caller (`Authorization: Bearer`: a console token, or the OpenID provider's access token,
console/api/callers.py); its roles are the roles file's, as a signed-in user's; every action goes
through the same actions as a page (console.actions: one role check, one write-ahead audit record naming
the caller); every refusal is audited; errors are RFC 9457 problem details."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import Match

from console.api.callers import Callers
from console.api.changes import changes
from console.api.context import Context
from console.api.maintenance import maintenance
from console.api.oidc_tokens import AccessTokens
from console.api.problems import Problem, problem
from console.api.reads import reads
from console.api.consumers import consumers
from console.api.repair import repair
from console.api.tokens import TokenStore
from console.fleet import Fleet

API = "/api/v1"


def make_api(fleet: Fleet, tokens: TokenStore, access_tokens: AccessTokens | None = None) -> FastAPI:
    api = FastAPI(title="JetStream Batch Console API", version="1", openapi_url=f"{API}/openapi.json", docs_url=None,
                  redoc_url=None, description=__doc__,
                  generate_unique_id_function=lambda route: route.name)  # operationId: the function's name (MCP's tools)
    ctx = Context(fleet, Callers(fleet, tokens, access_tokens, fleet.settings.web.refusals_every))
    api.state.callers = ctx.callers  # the MCP endpoint checks its tokens as the API does
    api.include_router(reads(ctx), prefix=API)
    api.include_router(changes(ctx), prefix=API)
    api.include_router(maintenance(ctx), prefix=API)
    api.include_router(consumers(ctx), prefix=API)
    api.include_router(repair(ctx), prefix=API)

    @api.exception_handler(Problem)
    async def on_problem(request: Request, e: Problem) -> JSONResponse:
        return problem(e.status, e.title, e.detail, request.url.path)

    @api.exception_handler(HTTPException)
    async def on_http(request: Request, e: HTTPException) -> JSONResponse:
        answer = problem(e.status_code, str(e.detail), "", request.url.path)
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
        return problem(422, "Invalid request", said, request.url.path)

    return api
