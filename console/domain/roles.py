"""Roles: what a user may do, as sets of the action registry's actions limited to stream-name patterns,
and whose payloads they may see; and the groups an identity provider names, mapped to roles. Read
strictly from a TOML file like the alert rules: a file with an error is refused whole, with its line.

    [[role]]
    name = "orders-operator"
    actions = ["message.*", "consumer.fetch", "search.run"]  # names (or globs) from the action registry
    streams = ["ORDERS*"]              # where those actions may act (globs); absent: every stream
    payloads = ["ORDERS_TEST*"]        # streams whose payloads it sees as stored
    masked_payloads = ["ORDERS*"]      # ... with the masking rules applied; every other stream: none
    systems = ["prod-*"]               # of a systems file, the systems it holds on (globs); absent: every one

    [[group]]
    name = "orders-team"               # a value of the identity provider's groups claim; "*": everyone
    roles = ["viewer", "orders-operator"]

Three roles are built in, made from the registry's least role of each action: viewer, operator (the
viewer's actions and the operator's) and admin (every action), each on every stream, with masked
payloads. A file may define a role of the same name instead.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Mapping

from console.domain.toml_text import FileRefused, read_toml, with_lines

BUILT_IN = ("viewer", "operator", "admin")  # each may do what the ones before it may
EVERYONE = "*"  # a [[group]] of this name maps every signed-in user
FULL, MASKED, NONE = "full", "masked", "none"  # what a user sees of a stream's payloads
ROLE_KEYS = {"name", "actions", "streams", "payloads", "masked_payloads", "systems"}
GROUP_KEYS = {"name", "roles"}
MAX_ROLES, MAX_GROUPS, MAX_LIST, MAX_NAME = 200, 1000, 200, 256
_ROLE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class RolesError(FileRefused):
    """A roles file the console refuses."""


@dataclass(frozen=True)
class Role:
    name: str
    actions: frozenset[str]
    streams: tuple[str, ...] = ("*",)
    payloads: tuple[str, ...] = ()
    masked_payloads: tuple[str, ...] = ("*",)
    systems: tuple[str, ...] = ("*",)

    def acts_on(self, stream: str) -> bool:
        return _matches(stream, self.streams)


def _matches(stream: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(stream, glob) for glob in globs)


def built_in_roles(least_role: Mapping[str, str]) -> dict[str, Role]:
    """viewer, operator and admin from the registry (action name -> the least role that may ask for it)."""
    return {name: Role(name, frozenset(a for a, least in least_role.items() if BUILT_IN.index(least) <= rank))
            for rank, name in enumerate(BUILT_IN)}


@dataclass(frozen=True)
class Grants:
    """What one user may do: the union of their roles."""

    roles: tuple[Role, ...]

    @property
    def names(self) -> str:
        return ", ".join(r.name for r in self.roles) or "no role"

    def why_not(self, action: str, stream: str | None = None) -> str | None:
        """Why `action` (on `stream`, when it acts on one) is refused to these roles, or None. Without a
        stream, whether it is allowed on some stream: a page asks so before its stream is chosen."""
        holding = [r for r in self.roles if action in r.actions]
        if not holding:
            return f"the role {self.names} may not {action}" if len(self.roles) < 2 else \
                f"the roles {self.names} may not {action}"
        if stream is None or any(r.acts_on(stream) for r in holding):
            return None
        where = ", ".join(sorted({glob for r in holding for glob in r.streams}))
        return f"{self.names} may {action} only on streams {where}, not on {stream}"

    def sees(self, stream: str | None) -> bool:
        """Whether these roles see `stream` at all (its name, settings, losses, findings, history rows and
        audit records): a role sees the streams it acts on, and what concerns no stream every role sees."""
        return stream is None or any(r.acts_on(stream) for r in self.roles)

    @property
    def sees_every_stream(self) -> bool:
        return any("*" in r.streams for r in self.roles)

    def on_system(self, system: str) -> Grants:
        """These roles as they hold on one system of a systems file (a role limited to others: none)."""
        return Grants(tuple(r for r in self.roles if _matches(system, r.systems)))

    def payloads(self, stream: str) -> str:
        """What these roles see of `stream`'s payloads: FULL, MASKED or NONE."""
        if any(_matches(stream, r.payloads) for r in self.roles):
            return FULL
        if any(_matches(stream, r.masked_payloads) for r in self.roles):
            return MASKED
        return NONE


@dataclass(frozen=True)
class RolesFile:
    """The roles (built in, or as the file defines them) and each group's roles."""

    roles: dict[str, Role]
    groups: dict[str, tuple[str, ...]]

    def grants(self, *role_names: str) -> Grants:
        return Grants(tuple(self.roles[n] for n in dict.fromkeys(role_names) if n in self.roles))

    def for_groups(self, groups: tuple[str, ...]) -> Grants:
        """The roles of a user in these groups ("*" maps everyone); no role when none maps."""
        names = [role for group in (EVERYONE, *groups) for role in self.groups.get(group, ())]
        return self.grants(*names)


def load_roles(text: str, least_role: Mapping[str, str]) -> RolesFile:
    """The roles and groups of a file (an empty text: the built-in roles, no group), or RolesError with
    its line. `least_role`: the action registry, name -> the least built-in role that may ask for it."""
    data = read_toml(text, RolesError)
    if unknown := set(data) - {"role", "group"}:
        raise RolesError(f"unknown table or key: {', '.join(sorted(unknown))[:100]} (only [[role]] and [[group]])")
    roles = built_in_roles(least_role)
    defined: set[str] = set()
    for table, line in with_lines(text, "role", _tables(data, "role", MAX_ROLES)):
        role = _role(table, least_role, line)
        if role.name in defined:
            raise RolesError(f"role {role.name!r} is defined twice", line)
        defined.add(role.name)
        roles[role.name] = role
    groups: dict[str, tuple[str, ...]] = {}
    for table, line in with_lines(text, "group", _tables(data, "group", MAX_GROUPS)):
        if extra := set(table) - GROUP_KEYS:
            raise RolesError(f"unknown key {sorted(extra)[0]!r} (name, roles)", line)
        name = table.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or not name.isprintable():
            raise RolesError("name: the group as the identity provider names it (printable, at most 256)", line)
        if name in groups:
            raise RolesError(f"group {name!r} is mapped twice", line)
        names = _strings(table.get("roles"), "roles", line)
        if not names:
            raise RolesError("roles: at least one role", line)
        for role_name in names:
            if role_name not in roles:
                raise RolesError(f"unknown role {role_name[:64]!r} (roles: {', '.join(sorted(roles))[:200]})", line)
        groups[name] = names
    return RolesFile(roles, groups)


def _role(table: Any, least_role: Mapping[str, str], line: int | None) -> Role:
    if extra := set(table) - ROLE_KEYS:
        raise RolesError(f"unknown key {sorted(extra)[0]!r} ({', '.join(sorted(ROLE_KEYS))})", line)
    name = table.get("name")
    if not isinstance(name, str) or not _ROLE_NAME.match(name):
        raise RolesError("name: letters, digits, '_', '.', '-', at most 64", line)
    actions: set[str] = set()
    for pattern in _strings(table.get("actions"), "actions", line):
        found = fnmatch.filter(least_role, pattern)
        if not found:
            raise RolesError(f"unknown action {pattern[:64]!r} (actions: {', '.join(sorted(least_role))})", line)
        actions.update(found)
    streams = _strings(table.get("streams", ["*"]), "streams", line)
    if not streams:
        raise RolesError("streams: at least one stream or glob (absent: every stream)", line)
    systems = _strings(table.get("systems", ["*"]), "systems", line)
    if not systems:
        raise RolesError("systems: at least one system or glob (absent: every system)", line)
    return Role(name, frozenset(actions), streams, _strings(table.get("payloads", []), "payloads", line),
                _strings(table.get("masked_payloads", []), "masked_payloads", line), systems)


def _tables(data: dict[str, Any], name: str, most: int) -> list[Any]:
    tables = data.get(name, [])
    if not isinstance(tables, list) or len(tables) > most or not all(isinstance(t, dict) for t in tables):
        raise RolesError(f"[[{name}]] tables, at most {most}")
    return tables


def _strings(value: Any, key: str, line: int | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_LIST or not all(
            isinstance(v, str) and 0 < len(v) <= MAX_NAME and v.isprintable() for v in value):
        raise RolesError(f"{key}: a list of at most {MAX_LIST} names (printable, at most {MAX_NAME})", line)
    return tuple(value)
