"""Sign-in through an OpenID Connect provider: the authorization code flow with PKCE, for the web app.

Panel's generic OAuth provider decodes the ID token without checking its signature; this one checks
everything a relying party must (OpenID Connect Core 3.1.3.7): the signature against the provider's
published keys, the issuer, the audience, the expiry and the nonce, and the `iss` the provider adds
to its redirect (RFC 9207), so a code or a token from another provider is refused. The user's groups
come from the ID token or, when it does not carry them, from the userinfo endpoint.

A signed-in session is a cookie signed with the process's secret: the user, their groups, the issuer
and when it ends. It is checked on every request and websocket (Bokeh asks `get_user`), and its end
also reaches the action layer, so a page left open cannot act after it. Signing out revokes it here,
then ends the provider's session where it offers an end_session_endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, urlencode

import jwt
from panel.auth import BasicAuthProvider
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.web import RequestHandler, decode_signed_value

from console.config import AccessSettings
from console.login import cookie_flags, page, safe_next
from console.domain.roles import RolesFile
from console.errors import ConfigError

log = logging.getLogger(__name__)

SESSION_COOKIE = "bc_session"
FLOW_COOKIE = "bc_oidc_flow"
FLOW_SECONDS = 600  # a sign-in must come back from the provider within this
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
LEEWAY = 60  # seconds of clock difference with the provider
MAX_BODY = 1 << 20
MAX_GROUPS, MAX_GROUP = 200, 256
KEYS_AGAIN_AFTER = 60.0  # seconds: an unknown key id fetches the provider's keys again at most this often


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
            return "".join(c if c.isprintable() else "?" for c in value)[:128]
    raise SignInError("the provider named no user (no sub)")


class Provider:
    """One OpenID Connect provider, as its discovery document describes it, with its signing keys."""

    def __init__(self, access: AccessSettings, discovery: dict[str, Any], keys: jwt.PyJWKSet | None = None):
        self.access, self.discovery, self._keys = access, discovery, keys
        self._keys_read = time.monotonic()
        self.issuer = access.oidc_issuer or ""

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
        except (OSError, HTTPClientError, ValueError) as e:
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
            await provider._read_keys()
        except (OSError, HTTPClientError, ValueError) as e:
            raise ConfigError(f"the OpenID provider's keys ({discovery['jwks_uri']}) cannot be read: {e}") from None
        return provider

    async def _read_keys(self) -> None:
        try:
            self._keys = jwt.PyJWKSet.from_dict(await _get_json(self.discovery["jwks_uri"]))
        except (jwt.PyJWKSetError, jwt.InvalidKeyError) as e:
            raise SignInError(f"the provider's keys cannot be read: {e}") from None
        self._keys_read = time.monotonic()

    async def _key(self, kid: str | None) -> jwt.PyJWK:
        for again in (False, True):
            found = [k for k in (self._keys.keys if self._keys else []) if kid is None or k.key_id == kid]
            if len(found) == 1:
                return found[0]
            if again or time.monotonic() - self._keys_read < KEYS_AGAIN_AFTER:
                break
            await self._read_keys()  # the provider may have rolled its keys
        raise SignInError("the ID token is not signed by a key of the provider")

    def authorize_url(self, redirect_uri: str, state: str, nonce: str, challenge: str) -> str:
        query = {"response_type": "code", "client_id": self.access.oidc_client_id, "redirect_uri": redirect_uri,
                 "scope": " ".join(self.access.oidc_scopes), "state": state, "nonce": nonce,
                 "code_challenge": challenge, "code_challenge_method": "S256"}
        return f"{self.discovery['authorization_endpoint']}?{urlencode(query)}"

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
        body = urlencode({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                          "code_verifier": verifier})
        basic = base64.b64encode(f"{_form(self.access.oidc_client_id)}:{_form(self.access.oidc_client_secret)}"
                                 .encode()).decode()
        try:
            tokens = await _fetch_json(HTTPRequest(self.discovery["token_endpoint"], method="POST", body=body, headers={
                "Content-Type": "application/x-www-form-urlencoded", "Authorization": f"Basic {basic}",
                "Accept": "application/json"}))
        except HTTPClientError as e:
            raise SignInError(f"the provider refused the code ({e.code})") from None
        id_token, access_token = tokens.get("id_token"), tokens.get("access_token")
        if not isinstance(id_token, str):
            raise SignInError("the provider sent no ID token")
        claims = await self.verify(id_token, nonce)
        groups = user_groups(claims, self.access.oidc_groups_claim)
        if groups is None and isinstance(access_token, str) and isinstance(self.discovery.get("userinfo_endpoint"), str):
            info = await _fetch_json(HTTPRequest(self.discovery["userinfo_endpoint"],
                                                 headers={"Authorization": f"Bearer {access_token}"}))
            if info.get("sub") != claims.get("sub"):  # OpenID Connect Core 5.3.2: else it is not this user's
                raise SignInError("the userinfo answer is about another user")
            groups = user_groups(info, self.access.oidc_groups_claim)
            claims = {**info, **claims}
        return user_name(claims, self.access.oidc_user_claim), groups or ()

    async def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims once its signature, issuer, audience, times and nonce hold; else SignInError."""
        try:
            header = jwt.get_unverified_header(id_token)
        except jwt.DecodeError:
            raise SignInError("the ID token is not a JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise SignInError(f"the ID token's algorithm {str(alg)[:20]!r} is not taken")
        key = await self._key(header.get("kid") if isinstance(header.get("kid"), str) else None)
        try:
            claims = jwt.decode(id_token, key=key, algorithms=[alg], audience=self.access.oidc_client_id,
                                issuer=self.access.oidc_issuer, leeway=LEEWAY,
                                options={"require": ["iss", "aud", "exp", "iat", "sub"]})
        except jwt.InvalidIssuerError:
            raise SignInError("the ID token is from another issuer") from None
        except jwt.PyJWTError as e:
            raise SignInError(f"the ID token is refused: {e}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.access.oidc_client_id:
            raise SignInError("the ID token was issued to another client")
        if not isinstance(claims.get("nonce"), str) or not secrets.compare_digest(claims["nonce"], nonce):
            raise SignInError("the ID token's nonce is not this sign-in's")
        return claims


def _form(text: str | None) -> str:
    return quote(text or "", safe="")  # RFC 6749 2.3.1: form-encoded before the basic scheme


async def _get_json(url: str) -> dict[str, Any]:
    return await _fetch_json(HTTPRequest(url, headers={"Accept": "application/json"}))


async def _fetch_json(request: HTTPRequest) -> dict[str, Any]:
    request.request_timeout = request.connect_timeout = 10.0
    request.follow_redirects = False
    client = AsyncHTTPClient(force_instance=True, max_body_size=MAX_BODY)
    try:
        response = await client.fetch(request)
    finally:
        client.close()
    value = json.loads(response.body)
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
                 **params):
        self.provider, self.roles, self.revoked, self.cookie_secret = provider, roles, Revoked(), cookie_secret
        self.console_url = console_url.rstrip("/") if console_url else None  # behind a proxy: the URL users see
        super().__init__(**params)

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
    def get_user(self):
        def get_user(handler: RequestHandler) -> str | None:
            session = self.session(handler)
            return session.user if session else None
        return get_user

    @property
    def login_handler(self):
        auth = self

        class Login(SignInHandler):
            oidc = auth
        return Login

    @property
    def logout_handler(self):
        auth = self

        class Logout(SignOutHandler):
            oidc = auth
        return Logout


def _base(handler: RequestHandler, oidc: OidcAuth) -> str:
    # The provider sends the browser back only to a URI registered with it, whatever Host a request names
    return oidc.console_url or f"{handler.request.protocol}://{handler.request.host}"


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


class SignInHandler(RequestHandler):
    """GET /login starts a sign-in at the provider; the provider sends the browser back here with a code."""

    oidc: OidcAuth
    _next = "/"  # where the browser goes once signed in: a path on this console only

    def _redirect_uri(self) -> str:
        return f"{_base(self, self.oidc)}/login"

    async def get(self) -> None:
        if self.get_argument("code", None) is None and self.get_argument("error", None) is None:
            return self._start()
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

    def _start(self) -> None:
        state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
        flow = json.dumps({"state": state, "nonce": nonce, "verifier": verifier, "at": time.time(),
                           "next": safe_next(self.get_argument("next", "/"))})
        self.set_signed_cookie(FLOW_COOKIE, flow, **cookie_flags(self, self.oidc.console_url),
                               expires=time.time() + FLOW_SECONDS)
        self.redirect(self.oidc.provider.authorize_url(self._redirect_uri(), state, nonce, _challenge(verifier)))

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
