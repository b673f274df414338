"""Settings, read once at the entry point and passed down. No side effects at import."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_SERVER = "nats://127.0.0.1:4222"


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


def _strip_userinfo(url: str) -> str:
    """nats://user:secret@host:4222 -> nats://***@host:4222"""
    scheme, sep, rest = url.rpartition("://")
    if "@" not in rest:
        return url
    return f"{scheme}{sep}***@{rest.split('@', 1)[1]}"
