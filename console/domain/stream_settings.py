"""A stream's batch settings and the server's rules for them, checked before anything is sent."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import re

from console.domain.wire import INT64_MAX

REQUIRED_LEVEL_KEY = "_nats.req.level"
ATOMIC_API_LEVEL = 2  # nats-server 2.12
BATCHED_API_LEVEL = 4  # nats-server 2.14 (ADR-50 says 3; the server records 4)
_DOMAIN_API = re.compile(r"\$JS\.([A-Za-z0-9_-]{1,64})\.API")  # another JetStream domain's API prefix


@dataclass(frozen=True)
class StreamBatchSettings:
    name: str
    allow_atomic: bool = False
    allow_batched: bool = False
    persist_mode: str = "default"  # "default" | "async"
    replicas: int = 1
    is_mirror: bool = False
    sources: int = 0
    required_api_level: int | None = None  # from the stream's metadata, as the server recorded it
    retention: str = "limits"  # limits | interest | workqueue
    max_age: float = 0.0  # seconds; 0: no limit
    allow_msg_ttl: bool = False
    consumers: int | None = None  # from the stream's state, where known
    copies_of: tuple[str, ...] = ()  # the streams of its own JetStream it mirrors or sources, by name
    copies_from: tuple[tuple[str, str], ...] = ()  # (domain, stream) it mirrors or sources in another domain

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StreamBatchSettings:
        """From a stream config as JSON (the API's field names); absent fields take server defaults."""
        metadata = config.get("metadata") or {}
        level = metadata.get(REQUIRED_LEVEL_KEY)
        return cls(
            name=config["name"],
            allow_atomic=bool(config.get("allow_atomic")),
            allow_batched=bool(config.get("allow_batched")),
            persist_mode=config.get("persist_mode") or "default",
            replicas=int(config.get("num_replicas") or 1),
            is_mirror=config.get("mirror") is not None,
            sources=len(config.get("sources") or ()),
            required_api_level=int(level) if isinstance(level, str) and level.isdigit() else None,
            retention=str(getattr(config.get("retention"), "value", config.get("retention")) or "limits"),
            max_age=_seconds(config.get("max_age")),
            allow_msg_ttl=bool(config.get("allow_msg_ttl")),
            copies_of=tuple(name for domain, name in _origins(config) if domain is None),
            copies_from=tuple((domain, name) for domain, name in _origins(config) if domain is not None),
        )

    def with_changes(self, **changes: Any) -> StreamBatchSettings:
        return replace(self, **changes)


def _origins(config: Mapping[str, Any]) -> tuple[tuple[str | None, str], ...]:
    """The streams a config mirrors or sources (64 at most; a name that is not text left out), each with its
    JetStream domain when it is another's (external: {api: "$JS.<domain>.API"}); "" for another account's
    or an API prefix that names no domain."""
    given = [config.get("mirror"), *(config.get("sources") or ())][:64]
    return tuple((_domain_of(o.get("external")), o["name"][:255]) for o in given
                 if isinstance(o, Mapping) and isinstance(o.get("name"), str))


def _domain_of(external: Any) -> str | None:
    if not isinstance(external, Mapping):
        return None
    api = external.get("api")
    found = _DOMAIN_API.fullmatch(api) if isinstance(api, str) else None
    return found[1] if found else ""


def _seconds(nanos: Any) -> float:
    """A duration of the API (nanoseconds) in seconds; 0 for none."""
    return nanos / 1e9 if isinstance(nanos, (int, float)) and 0 < nanos <= INT64_MAX else 0.0


@dataclass(frozen=True)
class RuleViolation:
    field: str
    message: str
    err_code: int | None = None  # the server's code for the same refusal, where it has one


def needed_api_level(settings: StreamBatchSettings) -> int:
    """The API level a server needs to honour these flags (0 when neither is set)."""
    level = 0
    if settings.allow_atomic:
        level = ATOMIC_API_LEVEL
    if settings.allow_batched:
        level = max(level, BATCHED_API_LEVEL)
    return level


def check_settings(settings: StreamBatchSettings, server_api_level: int | None = None) -> list[RuleViolation]:
    """Every rule the server would enforce on these settings; empty when they are acceptable."""
    found: list[RuleViolation] = []
    if settings.persist_mode not in ("default", "async"):
        found.append(RuleViolation("persist_mode", f"unknown persist mode {settings.persist_mode!r}"))
    if settings.persist_mode == "async" and settings.replicas != 1:
        found.append(RuleViolation("persist_mode", f"async persist is only allowed on R1 (stream has R{settings.replicas})"))
    if settings.persist_mode == "async" and settings.allow_atomic:
        found.append(RuleViolation("persist_mode", "async persist mode is not supported with atomic batch publish", 10052))
    if settings.is_mirror and settings.allow_atomic:
        found.append(RuleViolation("allow_atomic", "stream mirrors can not also use atomic publishing", 10198))
    if settings.is_mirror and settings.allow_batched:
        found.append(RuleViolation("allow_batched", "stream mirrors can not also use batch publishing", 10209))
    needed = needed_api_level(settings)
    if server_api_level is not None and needed > server_api_level:
        flag = "allow_batched" if settings.allow_batched and server_api_level < BATCHED_API_LEVEL else "allow_atomic"
        found.append(RuleViolation(flag, f"needs JetStream API level {needed}, the server has {server_api_level}"))
    return found


def check_change(before: StreamBatchSettings, after: StreamBatchSettings,
                 server_api_level: int | None = None) -> list[RuleViolation]:
    """check_settings on the result, plus what an update may not change (seen on nats-server 2.15:
    "stream configuration update can not change persist mode", 10052)."""
    found = check_settings(after, server_api_level)
    if before.persist_mode != after.persist_mode:
        found.append(RuleViolation("persist_mode", "stream configuration update can not change persist mode", 10052))
    return found


EDITABLE = ("allow_atomic", "allow_batched", "persist_mode")  # the batch settings the console edits


def diff_settings(before: StreamBatchSettings, after: StreamBatchSettings) -> dict[str, tuple[Any, Any]]:
    """field -> (before, after) for the editable fields that change."""
    return {f: (getattr(before, f), getattr(after, f)) for f in EDITABLE if getattr(before, f) != getattr(after, f)}
