"""The collector's status, as one typed record: written every few seconds into the event log, read
by Live, the CLI and the benchmarks. JSON only at the edge; a record from an older collector lacks
fields and gets their defaults, a malformed one is a MalformedInput."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from console.domain.wire import MalformedInput, load_object

MAX_STATUS = 64 * 1024
MAX_NUMBER = 2**53  # any count or duration past this was not written by a collector


class MalformedStatus(MalformedInput):
    what = "collector status"


@dataclass(frozen=True)
class CollectorStatus:
    instance: str = ""
    alive_s: float = 0.0
    connected: bool = False
    healthy: bool = True  # the collector's own verdict on its loops
    unhealthy: tuple[str, ...] = ()  # what is wrong, in words, when it is not
    events_written: int = 0
    replies_tapped: int = 0
    duplicates: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # bad input by reason: counted, quarantined, skipped
    errors: dict[str, int] = field(default_factory=dict)  # transient failures it survived
    ignored: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    not_quarantined: int = 0  # past the quarantine's rate, only counted
    advisory_lag: int | None = None
    advisories_durable: bool = False
    batches_tracked: int = 0
    batches_untracked: int = 0
    batches_not_graded: int = 0  # new batches past their reply prefix's share of the conformance grader
    batches_refused_by_prefix: dict[str, int] = field(default_factory=dict)
    # replies of batches not tracked past 100 a second a prefix (1,000 in all): counted, not said as events
    unsaid_by_prefix: dict[str, int] = field(default_factory=dict)
    batch_timeout: float = 10.0
    batch_timeout_source: str = ""
    queued: int = 0
    problems: tuple[str, ...] = ()  # permission errors and the like
    notes: tuple[str, ...] = ()  # how an existing event log differs from what the console would create
    loops: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> restarts, last error
    cpu: dict[str, Any] | None = None  # CpuPriority.status()
    publishers_known: int = 0  # reply prefixes whose connection CONNZ named
    connz_requests: int = 0
    publisher_note: str = ""  # why no publisher can be known ("publisher unknown: no system account"), or ""
    # The audit trail's head as the collector saw it grow (its sequence and chain hash; kept when the trail
    # lost it): a witness outside the trail, signed like every status, that --verify holds it against
    audit_seq: int = 0
    audit_hash: str = ""
    # the wire's fast paths that nats-py here leaves off, each "path: why" (console.broker.nats_internals)
    fast_paths_off: tuple[str, ...] = ()

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: str | bytes) -> CollectorStatus:
        obj = load_object(data, MalformedStatus, MAX_STATUS)
        values = {}
        for f in fields(cls):
            if f.name in obj and obj[f.name] is not None:
                values[f.name] = _typed(f.name, str(f.type), obj[f.name])  # annotations are text here
        return cls(**values)


def _typed(name: str, kind: str, value: Any) -> Any:
    """The JSON value as the field's type; MalformedStatus when it is not that."""
    if kind == "str" and isinstance(value, str):
        return value[:1000]
    if kind in ("int", "int | None") and type(value) is int and 0 <= value <= MAX_NUMBER:
        return value
    if kind == "float" and type(value) in (int, float) and 0 <= value <= MAX_NUMBER:  # not inf, nan or 1e400
        return float(value)
    if kind == "bool" and type(value) is bool:
        return value
    if kind == "tuple[str, ...]" and isinstance(value, list):
        return tuple(str(v)[:300] for v in value[:50])
    if kind == "dict[str, int]":
        if isinstance(value, dict) and all(type(v) is int and 0 <= v <= MAX_NUMBER for v in value.values()):
            return {str(k)[:200]: v for k, v in value.items()}
    elif kind.startswith("dict[str, ") and isinstance(value, dict):
        return value
    raise MalformedStatus(f"{name!r} is not a {kind}")
