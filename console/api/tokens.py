"""API tokens: `batch-console token create --name NAME --role ROLE [--expires 30d]` prints a token once;
only its SHA-256 is kept, in DATA_DIR/api-tokens.json (the owner's alone), with its name, role, expiry
and revocation. A token is 32 random bytes: a plain hash of it cannot be reversed or guessed."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from console.config import file_stamp
from console.errors import ConfigError

TOKENS_FILE = "api-tokens.json"
PREFIX = "bct_"  # a console token, recognisable in a secret scanner's rules
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_TOKEN = 128  # characters of an Authorization header's token read at all
MAX_TOKENS = 1000


@dataclass(frozen=True)
class ApiToken:
    name: str
    role: str
    digest: str  # SHA-256 of the token, hex
    created: str  # ISO 8601, UTC
    expires: str | None = None
    revoked: str | None = None
    rate: float = 20.0  # calls a second it may make (twice as many at once)

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and datetime.fromisoformat(self.expires) <= now

    @property
    def expiry(self) -> datetime | None:
        return datetime.fromisoformat(self.expires) if self.expires else None


def _token(row: object) -> ApiToken:
    """A row of the tokens file, read totally: any other shape or value is a ValueError or TypeError."""
    if not isinstance(row, dict):
        raise TypeError("not an object")
    token = ApiToken(**row)
    if not (isinstance(token.name, str) and NAME.match(token.name)):
        raise ValueError("its name")
    if not (isinstance(token.role, str) and 0 < len(token.role) <= 64 and token.role.isprintable()):
        raise ValueError("its role")
    if not (isinstance(token.digest, str) and re.fullmatch(r"[0-9a-f]{64}", token.digest)):
        raise ValueError("its digest")
    if token.created is None:
        raise ValueError("no time of creation")
    for when in (token.created, token.expires, token.revoked):
        if when is not None and (not isinstance(when, str) or len(when) > 64 or
                                 datetime.fromisoformat(when).tzinfo is None):
            raise ValueError("a time that is not ISO 8601 with its zone")
    if type(token.rate) not in (int, float) or not 0.1 <= token.rate <= 10_000:
        raise ValueError("its rate")
    return token


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    def __init__(self, data_dir: Path):
        self.path = data_dir / TOKENS_FILE
        self._read: tuple[object, dict[str, ApiToken]] | None = None

    def tokens(self) -> dict[str, ApiToken]:
        """Every token by name, as the file says now (read again when it changes)."""
        stamp = file_stamp(self.path)
        if self._read is None or self._read[0] != stamp:
            self._read = (stamp, self._load())
        return self._read[1]

    def _load(self) -> dict[str, ApiToken]:
        try:
            rows = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.path}: not a tokens file ({type(e).__name__})") from None
        if not isinstance(rows, list):
            raise ConfigError(f"{self.path}: not a tokens file")
        found = {}
        for n, row in enumerate(rows[:MAX_TOKENS], 1):
            try:
                token = _token(row)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{self.path}: token {n} is not one ({str(e)[:100]})") from None
            found[token.name] = token
        return found

    def create(self, name: str, role: str, expires_in: timedelta | None = None, rate: float = 20.0) -> str:
        """A new token (printed once, never kept): ConfigError for a bad or taken name."""
        if not NAME.match(name):
            raise ConfigError("a token's name: letters, digits, '_', '.', '-', at most 64")
        if not 0.1 <= rate <= 10_000:
            raise ConfigError("a token's rate: from 0.1 to 10,000 calls a second")
        known = self.tokens()
        if name in known and known[name].revoked is None:
            raise ConfigError(f"a token named {name!r} exists: revoke it first, or pick another name")
        if len(known) >= MAX_TOKENS:
            raise ConfigError(f"{MAX_TOKENS} tokens at most")
        token = PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(timezone.utc)
        record = ApiToken(name, role, digest(token), now.isoformat(),
                          (now + expires_in).isoformat() if expires_in else None, rate=rate)
        self._write({**known, name: record})
        return token

    def revoke(self, name: str) -> bool:
        known = self.tokens()
        if name not in known or known[name].revoked is not None:
            return False
        self._write({**known, name: replace(known[name], revoked=datetime.now(timezone.utc).isoformat())})
        return True

    def find(self, token: str) -> ApiToken | None:
        """The record whose hash this token has (revoked and expired ones too: the caller says which), or None."""
        if not token.startswith(PREFIX) or len(token) > MAX_TOKEN:
            return None
        wanted = digest(token)
        return next((t for t in self.tokens().values() if hmac.compare_digest(t.digest, wanted)), None)

    def _write(self, tokens: dict[str, ApiToken]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".api-tokens-")
        with os.fdopen(fd, "w") as f:
            json.dump([asdict(t) for t in tokens.values()], f, indent=1)
        os.replace(temp, self.path)  # mkstemp made it for its owner alone (0600)
        self._read = None
