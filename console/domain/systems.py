"""The systems file: every NATS system an operator runs, each with its servers, credentials, system
account and monitoring URL, and more accounts of the same system, each with its own user. Strict: any
key, type or value it does not expect refuses the whole file with its line, and a refusal never
repeats a password's or a token's value.

    [[system]]
    name = "prod-eu"                       # shown everywhere, in URLs and metrics
    servers = ["nats://a:4222", "nats://b:4222"]
    creds = "/run/secrets/prod-eu.creds"   # or user/password, token, nkey, tls_* as the flags
    system_creds = "/run/secrets/prod-eu-sys.creds"   # or system_user/system_password
    monitor_url = "http://a:8222"
    domains = ["edge-1", "edge-2"]         # leaf nodes' JetStream domains: advisories captured there too
    [[system.account]]                     # more accounts of the same system, each with its user
    name = "BILLING"
    creds = "/run/secrets/billing.creds"

Whether the files it names exist is the settings' question (console.config): this module reads text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from console.domain.toml_text import FileRefused, read_toml, with_lines
from console.domain.wire import printable

DEFAULT = "default"  # the one system of a console started without a systems file
MAX_SYSTEMS, MAX_ACCOUNTS, MAX_SERVERS = 32, 64, 32
MAX_TEXT = 1024  # a path, a URL, a user name
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")  # safe in a URL, a metric label, a subject token
_ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SERVER = re.compile(r"^(nats|tls|ws|wss)://[^\s/?#]+$")
_MONITOR = re.compile(r"^https?://[^\s/?#]+/?$")
PATHS = ("creds", "nkey", "tls_ca", "tls_cert", "tls_key")
SECRETS = ("password", "token")
ACCOUNT_KEYS = frozenset({"name", "user", *PATHS[:2], *SECRETS})
SYSTEM_KEYS = frozenset({"name", "servers", "user", *PATHS, *SECRETS, "system_creds", "system_user",
                         "system_password", "monitor_url", "account", "domains"})
MAX_DOMAINS = 64


_DOMAIN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a JetStream domain: a token of the $JS.<domain>.API prefix


def domain_name(text: object) -> str:
    """A JetStream domain's name, as a subject token takes it; ValueError for anything else."""
    if not isinstance(text, str) or not _DOMAIN.fullmatch(text):
        raise ValueError(f"a JetStream domain name: 1 to 64 letters, digits, '-' or '_' (not {printable(str(text)[:40])!r})")
    return text


class SystemsError(FileRefused):
    """A systems file refused, with its line."""


@dataclass(frozen=True)
class Credentials:
    """How one user signs in (at most one kind of credential, besides TLS)."""

    creds: str | None = None
    nkey: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None

    def __repr__(self) -> str:  # a secret never reaches a log through a repr
        kinds = [k for k in ("creds", "nkey", "user", "token") if getattr(self, k)]
        return f"Credentials({', '.join(kinds) or 'none'})"


@dataclass(frozen=True)
class AccountSpec:
    name: str
    credentials: Credentials
    line: int | None = None


@dataclass(frozen=True)
class SystemSpec:
    name: str
    servers: tuple[str, ...]
    credentials: Credentials
    tls: tuple[str | None, str | None, str | None] = (None, None, None)  # CA, certificate, key files
    system_account: Credentials | None = None
    monitor_url: str | None = None
    accounts: tuple[AccountSpec, ...] = ()
    line: int | None = None
    domains: tuple[str, ...] = ()  # leaf nodes' JetStream domains, whose advisories are captured there too

    def paths(self) -> list[tuple[str, str, int | None]]:
        """Every file the system names: (its key, the path, the line), for the settings to check."""
        found = [(k, getattr(self.credentials, k), self.line) for k in PATHS[:2] if getattr(self.credentials, k)]
        found += [(k, p, self.line) for k, p in zip(PATHS[2:], self.tls) if p]
        if self.system_account is not None and self.system_account.creds:
            found.append(("system_creds", self.system_account.creds, self.line))
        for account in self.accounts:
            found += [(k, getattr(account.credentials, k), account.line) for k in PATHS[:2]
                      if getattr(account.credentials, k)]
        return found


def each_account(systems: tuple[SystemSpec, ...]) -> tuple[SystemSpec, ...]:
    """Every account the console watches, as a system of its own: a system's first account under the
    system's name, each more account as SYSTEM/ACCOUNT (its own user; the system's servers, system account
    and monitoring URL). Each has its own event log, in its account's JetStream."""
    return tuple(scope for spec in systems for scope in (
        spec, *(SystemSpec(f"{spec.name}/{a.name}", spec.servers, a.credentials, spec.tls, spec.system_account,
                           spec.monitor_url, (), a.line, spec.domains) for a in spec.accounts)))


def load_systems(text: str) -> tuple[SystemSpec, ...]:
    """The systems of a file, in its order; SystemsError with the line of the first problem."""
    data = read_toml(text, SystemsError)
    if unknown := set(data) - {"system"}:
        raise SystemsError(f"unknown table or key {_shown(sorted(unknown)[0])} (only [[system]])", _line_of(text, unknown))
    tables = data.get("system")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise SystemsError("[[system]] tables: at least one")
    if len(tables) > MAX_SYSTEMS:
        raise SystemsError(f"{len(tables)} systems: at most {MAX_SYSTEMS} in one console")
    account_lines = iter(n for n, header in enumerate(text.splitlines(), 1)
                         if re.match(r"\s*\[\[\s*system\s*\.\s*account\s*\]\]", header))
    systems: list[SystemSpec] = []
    for table, line in with_lines(text, "system", tables):
        system = _system(table, line, account_lines)
        if any(s.name == system.name for s in systems):
            raise SystemsError(f"system {system.name!r} is named twice", line)
        systems.append(system)
    return tuple(systems)


def _system(table: dict[str, Any], line: int | None, account_lines: Iterator[int]) -> SystemSpec:
    if extra := set(table) - SYSTEM_KEYS:
        raise SystemsError(f"unknown key {_shown(sorted(extra)[0])} ({', '.join(sorted(SYSTEM_KEYS))})", line)
    name = _name(table.get("name"), _NAME, "name: letters, digits, '-', '_', at most 32, a letter or digit first",
                 line)
    servers = table.get("servers")
    if not isinstance(servers, list) or not 0 < len(servers) <= MAX_SERVERS or not all(
            isinstance(s, str) and len(s) <= MAX_TEXT and _SERVER.match(s) and "@" not in s for s in servers):
        raise SystemsError(f"servers: a list of 1 to {MAX_SERVERS} URLs (nats://, tls://, ws://, wss://; "
                           "credentials in their own keys, not in the URL)", line)
    system_account = None
    if table.get("system_creds") is not None or table.get("system_user") is not None:
        system_account = _credentials({"creds": table.get("system_creds"), "user": table.get("system_user"),
                                       "password": table.get("system_password")}, line, "system_")
    elif table.get("system_password") is not None:
        raise SystemsError("system_password without system_user", line)
    monitor = table.get("monitor_url")
    if monitor is not None and not (isinstance(monitor, str) and len(monitor) <= MAX_TEXT and _MONITOR.match(monitor)):
        raise SystemsError("monitor_url: http:// or https:// and a host, nothing after it", line)
    raw_accounts = table.get("account", [])
    if not isinstance(raw_accounts, list) or len(raw_accounts) > MAX_ACCOUNTS or \
            not all(isinstance(a, dict) for a in raw_accounts):
        raise SystemsError(f"[[system.account]] tables: at most {MAX_ACCOUNTS} a system", line)
    accounts: list[AccountSpec] = []
    for raw in raw_accounts:
        at = next(account_lines, None) or line
        if extra := set(raw) - ACCOUNT_KEYS:
            raise SystemsError(f"unknown key {_shown(sorted(extra)[0])} ({', '.join(sorted(ACCOUNT_KEYS))})", at)
        account = AccountSpec(_name(raw.get("name"), _ACCOUNT, "an account's name: letters, digits, '.', '-', '_', "
                                    "at most 64", at), _credentials(raw, at), at)
        if not any(getattr(account.credentials, k) for k in ("creds", "nkey", "user", "token")):
            raise SystemsError(f"account {account.name!r}: its own user (creds, nkey, user and password, or token)", at)
        if any(a.name == account.name for a in accounts):
            raise SystemsError(f"account {account.name!r} is named twice in system {name!r}", at)
        accounts.append(account)
    domains = table.get("domains", [])
    try:
        if not isinstance(domains, list) or len(domains) > MAX_DOMAINS:
            raise ValueError(f"a list of at most {MAX_DOMAINS} JetStream domain names")
        named = tuple(domain_name(d) for d in domains)
    except ValueError as e:
        raise SystemsError(f"domains: {e}", line) from None
    if len(set(named)) != len(named):
        raise SystemsError("domains: a domain is named twice", line)
    tls = tuple(_text(table.get(k), k, line) for k in PATHS[2:])
    if bool(tls[1]) != bool(tls[2]):
        raise SystemsError("tls_cert and tls_key go together", line)
    return SystemSpec(name, tuple(servers), _credentials(table, line), (tls[0], tls[1], tls[2]), system_account,
                      monitor, tuple(accounts), line, named)


def _credentials(table: dict[str, Any], line: int | None, prefix: str = "") -> Credentials:
    found = Credentials(*(_text(table.get(k), prefix + k, line) for k in ("creds", "nkey", "user")),
                        *(_text(table.get(k), prefix + k, line, secret=True) for k in SECRETS))
    kinds = [k for k in ("creds", "nkey", "user", "token") if getattr(found, k)]
    if len(kinds) > 1:
        raise SystemsError(f"{prefix}{kinds[0]} and {prefix}{kinds[1]}: one kind of credential a user", line)
    if bool(found.user) != bool(found.password):
        raise SystemsError(f"{prefix}user and {prefix}password go together", line)
    return found


def _name(value: Any, pattern: re.Pattern[str], rule: str, line: int | None) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise SystemsError(rule, line)
    return value


def _text(value: Any, key: str, line: int | None, secret: bool = False) -> str | None:
    """Never says back what was written (a secret's refusal says so)."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT or not value.isprintable():
        raise SystemsError(f"{key}: a text of 1 to {MAX_TEXT} printable characters{' (not shown)' if secret else ''}",
                           line)
    return value


def _shown(key: str) -> str:
    return repr(printable(key, 40))


def _line_of(text: str, keys: set[str]) -> int | None:
    for n, line in enumerate(text.splitlines(), 1):
        if any(re.match(rf"\s*\[*\s*{re.escape(k)}\b", line) for k in keys):
            return n
    return None
