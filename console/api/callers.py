"""Who calls the API: a console token (console/api/tokens.py) or, with `--oidc-api-audience`, the
OpenID provider's access token (console/api/oidc_tokens.py). Each call is one check here: a refusal is
audited and answered 401; a caller past its rate is answered 429. The caller's grants are the roles
file's, read at each call: a token's role, or the roles of an access token's groups."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from fastapi import Request

from console.actions import Actions
from console.api.oidc_tokens import AccessTokenRefused, AccessTokens
from console.api.problems import Problem
from console.api.refusals import WINDOW, Refusals
from console.api.tokens import PREFIX, TokenStore
from console.domain.audit import Actor, Outcome
from console.domain.roles import Grants
from console.errors import ConfigError
from console.fleet import Fleet
from console.queries.sight import Sight
from console.runtime import Runtime

ACCESS_TOKEN_RATE = 20.0  # calls a second an access token's user may make (twice as many at once)


@dataclass
class Caller:
    """Who calls: the name its audit records and its jobs go by, its grants, until when it may act."""

    name: str  # "token:NAME" or "oidc:USER"
    grants: Callable[[], Grants]
    expiry: datetime | None
    actor: Actor
    owner: str = ""  # whose jobs are whose: a token's own id (a name can be revoked and given again), a user

    @property
    def owns(self) -> str:
        return self.owner or self.name

    @property
    def role(self) -> str:
        return self.grants().names

    def actions(self, runtime: Runtime) -> Actions:
        return runtime.actions(self.actor, self.grants, self.expiry)

    @property
    def sight(self) -> Sight:
        """What it is shown: the one rule every face applies (console.queries.sight)."""
        return Sight(self.grants)

    def reads(self, stream: str | None) -> bool:
        """Whether it sees this stream (a role limited to TEAM_* reads nothing of another)."""
        return self.sight.sees(stream)


class Buckets:
    """A token bucket per caller: its rate sustained, twice its rate at once."""

    def __init__(self, most: int = 10_000) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self.most = most

    def take(self, name: str, rate: float) -> bool:
        now = time.monotonic()
        burst = 2 * rate
        if name not in self._buckets and len(self._buckets) >= self.most:  # the full ones are forgotten
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] + (now - v[1]) * rate < burst}
        level, at = self._buckets.get(name, (burst, now))
        level = min(burst, level + (now - at) * rate)
        if level < 1.0:
            self._buckets[name] = (level, now)
            return False
        self._buckets[name] = (level - 1.0, now)
        return True


class Unauthenticated(Exception):
    def __init__(self, who: str, why: str):
        super().__init__(why)
        self.who, self.why = who, why


class Callers:
    """Who calls, from a bearer token: the dependency every route names (`await callers(request)`), and
    what the MCP endpoint asks of a token (`identify`). Every refusal is audited."""

    def __init__(self, fleet: Fleet, tokens: TokenStore, access_tokens: AccessTokens | None = None,
                 refusals_window: float = WINDOW):
        self.fleet, self.tokens, self.access_tokens = fleet, tokens, access_tokens
        self.buckets = Buckets()
        self.refusals = Refusals(self._note, refusals_window)

    async def _note(self, actor: Actor, action: str, target: str, detail: str) -> None:
        runtime = self.fleet.runtime()
        if runtime is not None:
            await runtime.actions(actor, Grants(())).note(action, target, Outcome.UNAUTHENTICATED, detail)

    async def refused(self, actor: Actor, method: str, path: str, why: str) -> None:
        """A refusal, counted; in the first system's audit trail (an unknown caller acts on no system yet) at
        once when it is a quiet minute's first, else in the minute's summary (console.api.refusals)."""
        await self.refusals.refused(actor, method, path, why)

    async def __call__(self, request: Request) -> Caller:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        address, agent = request.client.host if request.client else "", request.headers.get("user-agent", "")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("api (no token)", "no bearer token")
            caller, rate = await self.identify(token.strip(), address, agent)
        except Unauthenticated as e:
            await self.refused(Actor(e.who, address, agent), f"api {request.method}", request.url.path, e.why)
            raise Problem(401, "Unauthorized", e.why) from None
        if not self.buckets.take(caller.name, rate):
            raise Problem(429, "Too many requests", f"{caller.name}: at most {rate:g} requests a second")
        return caller

    async def identify(self, token: str, address: str = "", agent: str = "") -> tuple[Caller, float]:
        """The caller a token is, and its rate; Unauthenticated (who, why) when it is none; a Problem 503
        when the tokens file cannot be read."""
        if token.startswith(PREFIX) or self.access_tokens is None:
            return self._console_token(token, address, agent)
        try:
            claims = await self.access_tokens.verify(token)
        except AccessTokenRefused as e:
            raise Unauthenticated("api (access token)", str(e)) from None
        who = f"oidc:{claims.user}"
        groups = claims.groups
        return (Caller(who, lambda: self.fleet.roles().for_groups(groups), claims.expires, Actor(who, address, agent)),
                ACCESS_TOKEN_RATE)

    def _console_token(self, token: str, address: str, agent: str) -> tuple[Caller, float]:
        try:
            found = self.tokens.find(token)
        except ConfigError as e:  # the tokens file cannot be read: no token is taken until it can
            raise Problem(503, "Tokens unreadable", str(e)[:300]) from None
        if found is None:
            raise Unauthenticated("api (unknown token)", "not a token of this console")
        who = f"token:{found.name}"
        if found.revoked is not None:
            raise Unauthenticated(who, f"token {found.name} revoked at {found.revoked}")
        if found.expired(datetime.now(timezone.utc)):
            raise Unauthenticated(who, f"token {found.name} expired at {found.expires}")
        role = found.role
        return (Caller(who, lambda: self.fleet.roles().grants(role), found.expiry, Actor(who, address, agent),
                       owner=f"token#{found.digest[:32]}"), found.rate)
