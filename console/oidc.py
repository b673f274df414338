"""Sign-in through an OpenID Connect provider: the authorization code flow with PKCE, for the web app.

Panel's generic OAuth provider decodes the ID token without checking its signature; this one has
Authlib do everything a relying party must (OpenID Connect Core 3.1.3.7): PKCE, the code exchange,
the signature against the provider's published keys (read again for a key id it does not know), the
issuer, the audience and authorized party, the times and the nonce. Here: the discovery document's
checks, the `iss` the provider adds to its redirect (RFC 9207), so a code or a token from another
provider is refused, and the user's groups, from the ID token or else the userinfo endpoint.

A signed-in session is a cookie signed with the process's secret: the user, their groups, the issuer
and when it ends. It is checked on every request and websocket (Bokeh asks `get_user`), and its end
also reaches the action layer, so a page left open cannot act after it. Signing out revokes it here,
then ends the provider's session where it offers an end_session_endpoint.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlencode

import httpx
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import BaseApp
from authlib.integrations.base_client.async_app import AsyncOAuth2Mixin
from authlib.integrations.base_client.async_openid import AsyncOpenIDMixin
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc.errors import JoseError
from panel.auth import BasicAuthProvider
from tornado.web import RequestHandler, decode_signed_value

from console.config import AccessSettings
from console.login import cookie_flags, page, safe_next
from console.domain.roles import RolesFile
from console.domain.wire import printable
from console.errors import ConfigError

log = logging.getLogger(__name__)

SESSION_COOKIE = "bc_session"
FLOW_COOKIE = "bc_oidc_flow"
FLOW_SECONDS = 600  # a sign-in must come back from the provider within this
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
LEEWAY = 60  # seconds of clock difference with the provider
MAX_BODY = 1 << 20
MAX_GROUPS, MAX_GROUP = 200, 256
TIMEOUT = 10.0  # seconds for any answer of the provider


class SignInError(Exception):
    """A sign-in refused: what the page says (never a token, a code or a secret)."""


@dataclass(frozen=True)
class Session:
    """A signed-in user, as the session cookie holds them."""

    user: str
    groups: tuple[str, ...]
    issuer: str
    expires: float  # epoch seconds
    sid: str

    def to_cookie(self) -> str:
        return json.dumps({"user": self.user, "groups": list(self.groups), "iss": self.issuer, "exp": self.expires,
                           "sid": self.sid}, separators=(",", ":"))

    @classmethod
    def from_cookie(cls, text: bytes | str | None) -> Session | None:
        """The session a signed cookie's value holds, or None for anything else."""
        if not text or len(text) > 16_384:
            return None
        try:
            obj = json.loads(text)
            user, groups, issuer, expires, sid = obj["user"], obj["groups"], obj["iss"], obj["exp"], obj["sid"]
        except (ValueError, TypeError, KeyError, RecursionError):
            return None
        if not (isinstance(user, str) and isinstance(issuer, str) and isinstance(sid, str)
                and isinstance(expires, (int, float)) and isinstance(groups, list)
                and all(isinstance(g, str) for g in groups)):
            return None
        return cls(user, tuple(groups), issuer, float(expires), sid)


def user_groups(claims: dict[str, Any], name: str) -> tuple[str, ...] | None:
    """The groups a claim lists (a list of names, or one name), bounded; None when the claim is absent."""
    value = claims.get(name)
    if value is None:
        return None
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(v for v in values if isinstance(v, str) and 0 < len(v) <= MAX_GROUP and v.isprintable())[:MAX_GROUPS]


def user_name(claims: dict[str, Any], name: str) -> str:
    for key in (name, "email", "sub"):
        value = claims.get(key)
        if isinstance(value, str) and value.strip():
            return printable(value, 128)
    raise SignInError("the provider named no user (no sub)")


class _RelyingParty(AsyncOAuth2Mixin, AsyncOpenIDMixin, BaseApp):  # type: ignore[misc]  # Authlib is untyped
    """Authlib's OpenID Connect client (authorization URL with PKCE, the code exchange, the ID token's
    signature and claims, userinfo) over httpx, on the discovery document read and checked here."""

    client_cls = AsyncOAuth2Client


class Provider:
    """One OpenID Connect provider, as its discovery document describes it; the relying party's work
    (PKCE, the code exchange, the ID token's checks, the provider's keys) is Authlib's."""

    def __init__(self, access: AccessSettings, discovery: dict[str, Any]):
        self.access, self.discovery = access, discovery
        self.issuer = access.oidc_issuer or ""
        offered = discovery.get("id_token_signing_alg_values_supported")
        algorithms = [a for a in (offered if isinstance(offered, list) else ["RS256"]) if a in ALGORITHMS]
        self.client = _RelyingParty(
            None, name="console", client_id=access.oidc_client_id, client_secret=access.oidc_client_secret,
            client_kwargs={"scope": " ".join(access.oidc_scopes), "code_challenge_method": "S256",
                           "token_endpoint_auth_method": "client_secret_basic", "timeout": TIMEOUT},
            **{**discovery, "id_token_signing_alg_values_supported": algorithms or ["RS256"]})

    @classmethod
    async def discover(cls, access: AccessSettings) -> Provider:
        """Reads the provider's discovery document and keys; ConfigError when it cannot be used."""
        issuer = (access.oidc_issuer or "").rstrip("/")
        if not (access.oidc_client_id and access.oidc_client_secret):
            raise ConfigError("sign-in through OpenID Connect needs --oidc-client-id and --oidc-client-secret")
        if "openid" not in access.oidc_scopes:
            raise ConfigError("--oidc-scopes must include openid")
        try:
            discovery = await _get_json(f"{issuer}/.well-known/openid-configuration")
        except (httpx.HTTPError, ValueError) as e:
            raise ConfigError(f"the OpenID provider {issuer} did not answer its discovery: {e}") from None
        if discovery.get("issuer") != access.oidc_issuer:
            raise ConfigError(f"the provider at {issuer} calls itself {str(discovery.get('issuer'))[:200]!r}, "
                              f"not {access.oidc_issuer!r}: give its issuer exactly")
        for needed in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(discovery.get(needed), str):
                raise ConfigError(f"the provider's discovery has no {needed}")
        methods = discovery.get("code_challenge_methods_supported")
        if isinstance(methods, list) and "S256" not in methods:
            raise ConfigError("the provider does not take PKCE with S256")
        provider = cls(access, discovery)
        try:
            await provider.client.fetch_jwk_set()
        except (httpx.HTTPError, ValueError) as e:
            raise ConfigError(f"the OpenID provider's keys ({discovery['jwks_uri']}) cannot be read: {e}") from None
        return provider

    async def authorize(self, redirect_uri: str) -> tuple[str, dict[str, str]]:
        """Where the browser signs in, and what this sign-in must find again: its state, nonce and PKCE verifier."""
        started = await self.client.create_authorization_url(redirect_uri)
        return started["url"], {k: started[k] for k in ("state", "nonce", "code_verifier")}

    def end_session_url(self, post_logout_redirect_uri: str) -> str | None:
        """Where the browser ends its session at the provider too (OpenID Connect RP-Initiated Logout),
        coming back to `post_logout_redirect_uri`; None when the provider offers no such endpoint."""
        end = self.discovery.get("end_session_endpoint")
        if not isinstance(end, str) or not end.startswith(("https://", "http://")):
            return None
        query = {"client_id": self.access.oidc_client_id, "post_logout_redirect_uri": post_logout_redirect_uri}
        return f"{end}{'&' if '?' in end else '?'}{urlencode(query)}"

    async def redeem(self, code: str, verifier: str, redirect_uri: str, nonce: str) -> tuple[str, tuple[str, ...]]:
        """The code exchanged at the token endpoint, its ID token checked: (the user, their groups)."""
        try:
            tokens = await self.client.fetch_access_token(redirect_uri=redirect_uri, code=code, code_verifier=verifier)
        except (AuthlibBaseError, httpx.HTTPError, ValueError) as e:
            raise SignInError(f"the provider refused the code ({getattr(e, 'error', None) or type(e).__name__})") from None
        if not isinstance(tokens.get("id_token"), str):
            raise SignInError("the provider sent no ID token")
        try:
            claims = dict(await self.client.parse_id_token(tokens, nonce, leeway=LEEWAY))
        except (AuthlibBaseError, JoseError, ValueError, KeyError) as e:
            raise SignInError(f"the ID token is refused: {str(e)[:200]}") from None
        groups = user_groups(claims, self.access.oidc_groups_claim)
        if groups is None and isinstance(self.discovery.get("userinfo_endpoint"), str):
            try:
                info = dict(await self.client.userinfo(token=tokens))
            except (AuthlibBaseError, httpx.HTTPError, ValueError) as e:
                raise SignInError(f"the provider's userinfo did not answer ({type(e).__name__})") from None
            if info.get("sub") != claims.get("sub"):  # OpenID Connect Core 5.3.2: else it is not this user's
                raise SignInError("the userinfo answer is about another user")
            groups = user_groups(info, self.access.oidc_groups_claim)
            claims = {**info, **claims}
        return user_name(claims, self.access.oidc_user_claim), groups or ()


async def _get_json(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False) as client:
        response = await client.get(url, headers={"Accept": "application/json"})
    response.raise_for_status()
    if len(response.content) > MAX_BODY:
        raise ValueError(f"an answer of {len(response.content)} bytes")
    value = json.loads(response.content)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


class Revoked:
    """Sessions signed out before they ended (their cookie could still be replayed until then)."""

    def __init__(self, most: int = 100_000):
        self.until: dict[str, float] = {}
        self.most = most

    def add(self, session: Session) -> None:
        now = time.time()
        if len(self.until) >= self.most:
            self.until = {sid: end for sid, end in self.until.items() if end > now}
        self.until[session.sid] = session.expires

    def __contains__(self, sid: str) -> bool:
        return sid in self.until


class OidcAuth(BasicAuthProvider):
    """Panel's provider hooks, served by this module's sign-in: `get_user` reads the session cookie."""

    def __init__(self, provider: Provider, roles: Callable[[], RolesFile], cookie_secret: str,
                 console_url: str | None = None,
                 **params: Any) -> None:
        self.provider, self.roles, self.revoked, self.cookie_secret = provider, roles, Revoked(), cookie_secret
        self.console_url = console_url.rstrip("/") if console_url else None  # behind a proxy: the URL users see
        super().__init__(**params)  # type: ignore[no-untyped-call]  # param's constructor has no types

    def session(self, handler: RequestHandler) -> Session | None:
        return self.session_of(handler.get_cookie(SESSION_COOKIE))

    def session_of(self, signed: str | None) -> Session | None:
        """The live session a session cookie's signed value holds: signed by this process, of this
        provider, not ended, not signed out; else None."""
        value = decode_signed_value(self.cookie_secret, SESSION_COOKIE, signed, max_age_days=31) if signed else None
        session = Session.from_cookie(value)
        if session is None or session.issuer != self.provider.issuer or session.expires <= time.time() \
                or session.sid in self.revoked:
            return None
        return session

    @property
    def get_user(self) -> Any:
        def get_user(handler: RequestHandler) -> str | None:
            session = self.session(handler)
            return session.user if session else None
        return get_user

    @property
    def login_handler(self) -> Any:
        auth = self

        class Login(SignInHandler):
            oidc = auth
        return Login

    @property
    def logout_handler(self) -> Any:
        auth = self

        class Logout(SignOutHandler):
            oidc = auth
        return Logout


def _base(handler: RequestHandler, oidc: OidcAuth) -> str:
    # The provider sends the browser back only to a URI registered with it, whatever Host a request names
    return oidc.console_url or f"{handler.request.protocol}://{handler.request.host}"


class SignInHandler(RequestHandler):
    """GET /login starts a sign-in at the provider; the provider sends the browser back here with a code."""

    oidc: OidcAuth
    _next = "/"  # where the browser goes once signed in: a path on this console only

    def _redirect_uri(self) -> str:
        return f"{_base(self, self.oidc)}/login"

    async def get(self) -> None:
        if self.get_argument("code", None) is None and self.get_argument("error", None) is None:
            return await self._start()
        try:
            session = await self._finish()
        except SignInError as e:
            log.warning("sign-in refused from %s: %s", self.request.remote_ip, e)
            return page(self, 403, "Sign-in refused", str(e), "/login")
        finally:
            self.clear_cookie(FLOW_COOKIE, path="/")
        grants = self.oidc.roles().for_groups(session.groups)
        if not grants.roles:
            log.warning("sign-in of %s refused: groups %s map to no role", session.user, list(session.groups)[:20])
            return page(self, 403, "No role for you here", f"Signed in as {session.user}, but none of your groups "
                         f"({', '.join(session.groups) or 'none'}) is given a role of this console.")
        cookie = {**cookie_flags(self, self.oidc.console_url), "expires": session.expires}
        self.set_signed_cookie(SESSION_COOKIE, session.to_cookie(), **cookie)
        self.set_signed_cookie("user", session.user, **cookie)  # what Panel's pn.state.user reads
        log.info("%s signed in (%s) from %s", session.user, grants.names, self.request.remote_ip)
        self.redirect(self._next)

    async def _start(self) -> None:
        url, started = await self.oidc.provider.authorize(self._redirect_uri())
        flow = json.dumps({"state": started["state"], "nonce": started["nonce"], "verifier": started["code_verifier"],
                           "at": time.time(), "next": safe_next(self.get_argument("next", "/"))})
        self.set_signed_cookie(FLOW_COOKIE, flow, **cookie_flags(self, self.oidc.console_url),
                               expires=time.time() + FLOW_SECONDS)
        self.redirect(url)

    async def _finish(self) -> Session:
        provider = self.oidc.provider
        try:
            flow = json.loads(self.get_signed_cookie(FLOW_COOKIE, max_age_days=1) or b"null")
        except ValueError:
            flow = None
        if not isinstance(flow, dict) or not all(isinstance(flow.get(k), str) for k in ("state", "nonce", "verifier")) \
                or not isinstance(flow.get("at"), (int, float)) or time.time() - flow["at"] > FLOW_SECONDS:
            raise SignInError("no sign-in of this browser is under way (or it took over 10 minutes)")
        self._next = safe_next(flow.get("next"))
        if not secrets.compare_digest(self.get_argument("state", "")[:200], flow["state"]):
            raise SignInError("the provider's answer is not for this sign-in (state)")
        iss = self.get_argument("iss", None)
        if iss is not None and iss != provider.issuer:  # RFC 9207: a mix-up with another provider
            raise SignInError("the answer comes from another issuer")
        if (error := self.get_argument("error", None)) is not None:
            raise SignInError(f"the provider said: {error[:100]}")
        user, groups = await provider.redeem(self.get_argument("code")[:2048], flow["verifier"],
                                             self._redirect_uri(), flow["nonce"])
        ends = time.time() + provider.access.session_minutes * 60
        return Session(user, groups, provider.issuer, ends, secrets.token_urlsafe(16))


class SignOutHandler(RequestHandler):
    """GET /logout ends the console's session, then the provider's where it offers an end_session_endpoint
    (register {console}/logout as a post-logout redirect URI with it): else the next sign-in would pass
    straight through the provider's own session."""

    oidc: OidcAuth

    def get(self) -> None:
        if (session := self.oidc.session(self)) is not None:
            self.oidc.revoked.add(session)
            log.info("%s signed out", session.user)
        for name in (SESSION_COOKIE, "user", "id_token"):
            self.clear_cookie(name, path="/")
        end = self.oidc.provider.end_session_url(f"{_base(self, self.oidc)}/logout")
        if session is not None and end is not None:
            return self.redirect(end)
        there = ("and of the identity provider" if end is not None else
                 "(your session at the identity provider stays: sign out there too on a shared machine)")
        page(self, 200, "Signed out", f"You are signed out of the console {there}.", "/login")
