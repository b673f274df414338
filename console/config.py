"""Settings, read once at the entry point and passed down. No side effects at import."""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from console.errors import ConfigError

DEFAULT_SERVER = "nats://127.0.0.1:4222"
EVENT_KEY_ENV = "BATCH_CONSOLE_EVENT_KEY"
EVENT_KEY_FILE = "event.key"
MIN_EVENT_KEY = 16  # characters


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach NATS. Secrets are kept out of repr() and out of describe()."""

    servers: tuple[str, ...] = (DEFAULT_SERVER,)
    name: str = "batch-console"
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    connect_timeout: float = 5.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ConnectionSettings:
        """Read BATCH_CONSOLE_* variables (servers comma separated)."""
        env = os.environ if environ is None else environ

        def get(key: str) -> str | None:
            return env.get(f"BATCH_CONSOLE_{key}") or None

        servers = tuple(s.strip() for s in (get("SERVER") or DEFAULT_SERVER).split(",") if s.strip())
        return cls(
            servers=servers,
            creds_file=get("CREDS"),
            nkey_seed_file=get("NKEY"),
            token=get("TOKEN"),
            user=get("USER"),
            password=get("PASSWORD"),
            tls_ca=get("TLS_CA"),
            tls_cert=get("TLS_CERT"),
            tls_key=get("TLS_KEY"),
        )

    def describe(self) -> str:
        """A line safe to log: where we connect and which kinds of credential are in use."""
        kinds = [
            label
            for label, present in (
                ("creds file", self.creds_file),
                ("nkey", self.nkey_seed_file),
                ("token", self.token),
                ("user/password", self.user),
                ("TLS", self.tls_ca or self.tls_cert),
            )
            if present
        ]
        return f"{', '.join(_strip_userinfo(s) for s in self.servers)} ({', '.join(kinds) or 'no credentials'})"


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """nats://user:secret@host -> (nats://host, user, secret); nats://token@host -> (nats://host, None, token)."""
    scheme, sep, rest = url.rpartition("://")
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url, None, None
    userinfo, host = authority.rsplit("@", 1)
    user, colon, secret = userinfo.partition(":")
    clean = f"{scheme}{sep}{host}{slash}{path}"
    return (clean, user or None, secret or None) if colon else (clean, None, userinfo or None)


def _strip_userinfo(url: str) -> str:
    """nats://user:secret@host:4222 -> nats://***@host:4222"""
    scheme, sep, rest = url.rpartition("://")
    if "@" not in rest:
        return url
    return f"{scheme}{sep}***@{rest.split('@', 1)[1]}"


def event_key(key_file: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
              environ: Mapping[str, str] | None = None) -> bytes:
    """The console's event key: the file given, else $BATCH_CONSOLE_EVENT_KEY, else DATA_DIR/event.key,
    made (readable by its owner only) when missing, so every part sharing a data directory shares
    the key. Its value is never logged."""
    env = os.environ if environ is None else environ
    if key_file:
        text = _read_key(Path(key_file))
    elif env.get(EVENT_KEY_ENV):
        text = env[EVENT_KEY_ENV]
    elif data_dir is not None:
        text = _key_in(Path(data_dir))
    else:
        raise ConfigError(f"no event key: give --event-key-file, set {EVENT_KEY_ENV} or a data directory")
    text = text.strip()
    if len(text) < MIN_EVENT_KEY:
        raise ConfigError(f"the event key is shorter than {MIN_EVENT_KEY} characters")
    return text.encode()


def _read_key(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the event key file {path}: {e.strerror}") from None


def _key_in(data_dir: Path) -> str:
    path = data_dir / EVENT_KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=data_dir, prefix=".event-key-")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.link(temp, path)  # atomic: of two parts starting together, one key wins and both read it
        except FileExistsError:
            pass
        finally:
            os.unlink(temp)
    return _read_key(path)
