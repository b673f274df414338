"""The OpenID provider's access tokens on the API and MCP (`--oidc-api-audience`): JWTs as RFC 9068
profiles them, taken only when every check holds. The signature with the provider's published keys
(read again, at most once a minute, for a key id not yet known), `typ` at+jwt (an ID token is not an
access token), the issuer exactly, the audience, the times (expiry required), and a subject. The
caller's roles come from its groups claim through the roles file, as a signed-in user's do."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from console.oidc import ALGORITHMS, LEEWAY, Provider, SignInError, user_groups, user_name

MAX_ACCESS_TOKEN = 8192  # characters of a JWT read at all
KEYS_AGAIN_AFTER = 60.0  # seconds: a forged key id cannot make every call fetch the provider's keys
ACCESS_TYPES = ("at+jwt", "application/at+jwt")
LAST_TIME = 253402300799  # 9999-12-31T23:59:59Z: an expiry past it is read as it


class AccessTokenRefused(Exception):
    """Why an access token is not taken (never the token itself)."""


@dataclass(frozen=True)
class AccessClaims:
    user: str
    groups: tuple[str, ...]
    expires: datetime


class AccessTokens:
    def __init__(self, provider: Provider, audience: str):
        self.provider, self.audience = provider, audience
        self._keys: KeySet | None = None
        self._read_at = 0.0

    async def _key_set(self, again: bool = False) -> KeySet:
        if self._keys is None or again:
            self._read_at = time.monotonic()
            self._keys = KeySet.import_key_set(await self.provider.client.fetch_jwk_set(force=again))
        return self._keys

    async def verify(self, token: str) -> AccessClaims:
        if len(token) > MAX_ACCESS_TOKEN or token.count(".") != 2:
            raise AccessTokenRefused("not a token of this console, nor a JWT access token")
        try:
            decoded = self._decode(token, await self._key_set())
        except (JoseError, ValueError) as e:
            if time.monotonic() - self._read_at < KEYS_AGAIN_AFTER:
                raise AccessTokenRefused(f"the access token is refused ({type(e).__name__})") from None
            try:  # a key the provider has rotated in since they were read
                decoded = self._decode(token, await self._key_set(again=True))
            except (JoseError, ValueError) as e:
                raise AccessTokenRefused(f"the access token is refused ({type(e).__name__})") from None
        except Exception as e:  # the provider's keys cannot be read: no token of it is taken meanwhile
            raise AccessTokenRefused(f"the provider's keys cannot be read ({type(e).__name__})") from None
        typ = decoded.header.get("typ")
        if not isinstance(typ, str) or typ.lower() not in ACCESS_TYPES:
            raise AccessTokenRefused("not an access token (RFC 9068: typ at+jwt)")
        claims: dict[str, Any] = dict(decoded.claims)
        registry = jwt.JWTClaimsRegistry(leeway=LEEWAY, iss={"essential": True, "value": self.provider.issuer},
                                         aud={"essential": True, "value": self.audience},
                                         exp={"essential": True}, sub={"essential": True})
        try:
            registry.validate(claims)
        except (JoseError, ValueError, TypeError) as e:
            raise AccessTokenRefused(f"the access token is refused ({str(e)[:120]})") from None
        exp = claims["exp"]
        if type(exp) not in (int, float):
            raise AccessTokenRefused("the access token's exp is not a number")
        try:
            user = user_name(claims, self.provider.access.oidc_user_claim)
        except SignInError as e:
            raise AccessTokenRefused(str(e)) from None
        groups = user_groups(claims, self.provider.access.oidc_groups_claim)
        return AccessClaims(user, groups or (), datetime.fromtimestamp(min(exp, LAST_TIME), timezone.utc))

    @staticmethod
    def _decode(token: str, keys: KeySet) -> jwt.Token:
        return jwt.decode(token, keys, algorithms=list(ALGORITHMS))
