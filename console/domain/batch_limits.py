"""The server's effective batch limits (from /varz), and the risks of a batch-settings edit that the
server does not refuse but that an operator must know before applying it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.domain.display import count, duration
from console.domain.server_versions import DEFAULTS_KNOWN_SINCE, ServerRelease
from console.domain.stream_settings import StreamBatchSettings

DEFAULT_BATCH_TIMEOUT = 10.0  # seconds an idle batch is kept when the server's configuration does not say
# /varz jetstream.limits -> the server config's jetstream.limits.batch knob. One knob sets both kinds;
# /varz omits a knob left at its default, and the defaults differ by kind.
KNOBS = {"max_batch_timeout": "timeout", "max_batch_inflight_per_stream": "max_inflight_per_stream",
         "max_batch_inflight_total": "max_inflight_total", "max_batch_size": "max_msgs"}
DEFAULTS = {  # (atomic, fast); None: no limit
    "max_batch_timeout": (DEFAULT_BATCH_TIMEOUT, DEFAULT_BATCH_TIMEOUT),
    "max_batch_inflight_per_stream": (50, 1000),
    "max_batch_inflight_total": (1000, 50_000),
    "max_batch_size": (1000, None),
}
TITLES = {"max_batch_timeout": "batch timeout (idle between two messages)",
          "max_batch_inflight_per_stream": "open batches per stream", "max_batch_inflight_total": "open batches per server",
          "max_batch_size": "messages per batch"}
SHORT_MAX_AGE = 60.0  # seconds: a batch recovered after a restart may find its first messages aged out


@dataclass(frozen=True)
class Limit:
    varz_key: str
    atomic: float | int | None
    fast: float | int | None
    configured: bool  # set in the server's config (both kinds then share it), else each kind's default
    # What a cell says instead of a value the console cannot know for this release (never a wrong default)
    atomic_unknown: str = ""
    fast_unknown: str = ""

    @property
    def title(self) -> str:
        return TITLES[self.varz_key]

    @property
    def source(self) -> str:
        knob = f"jetstream.limits.batch.{KNOBS[self.varz_key]}"
        return f"{knob} (one setting for both kinds)" if self.configured else f"default ({knob} not set)"

    def text(self, value: Any) -> str:
        if value is None:
            return "no limit"
        return duration(value) if self.varz_key == "max_batch_timeout" else count(value)


@dataclass(frozen=True)
class BatchLimits:
    limits: tuple[Limit, ...]

    @classmethod
    def from_varz(cls, varz: Any) -> BatchLimits:
        """Total: anything odd in the reply (not a dict, a negative or non-numeric value) is the default.
        A default the server's release (its /varz version) is not known to have is not assumed."""
        section = varz.get("jetstream") if isinstance(varz, dict) else None
        given = section.get("limits") if isinstance(section, dict) else None
        given = given if isinstance(given, dict) else {}
        version = varz.get("version") if isinstance(varz, dict) else None
        server = ServerRelease(version if isinstance(version, str) else "", None)
        r = server.release
        found = []
        for key, (atomic, fast) in DEFAULTS.items():
            value = given.get(key)
            no_fast = f"no fast ingest in {version}" if server.has("fast_ingest") is False else ""
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 2**63:
                value = value / 1e9 if key == "max_batch_timeout" else int(value)
                found.append(Limit(key, value, None if no_fast else value, True, fast_unknown=no_fast))
            else:
                unknown = f"not reported by {version}" if r is not None and r < DEFAULTS_KNOWN_SINCE[key] else ""
                found.append(Limit(key, None if unknown else atomic, None if no_fast or unknown else fast, False,
                                   unknown, no_fast or unknown))
        return cls(tuple(found))

    def get(self, varz_key: str) -> Limit:
        return next(limit for limit in self.limits if limit.varz_key == varz_key)

    @property
    def timeout(self) -> float:
        return float(self.get("max_batch_timeout").atomic or 10.0)  # not reported: what 2.14 and later default to

    def rows(self) -> list[dict[str, str]]:
        return [{"limit": lim.title, "atomic": lim.atomic_unknown or lim.text(lim.atomic),
                 "fast": lim.fast_unknown or lim.text(lim.fast), "set by": lim.source} for lim in self.limits]


def edit_risks(before: StreamBatchSettings, after: StreamBatchSettings, limits: BatchLimits | None = None) -> list[str]:
    """What applying would do that the server allows silently."""
    risks = []
    if before.allow_atomic and not after.allow_atomic:
        risks.append("Switching allow_atomic off drops every atomic batch open on the stream, with no "
                     "batch_abandoned advisory: their publishers learn it only at the commit.")
    if before.allow_batched and not after.allow_batched:
        risks.append("Switching allow_batched off drops every fast batch open on the stream, with no advisory: "
                     "their next message is refused.")
    if after.allow_atomic and after.replicas == 1:
        risks += _r1_recovery_risks(after, limits)
    return risks


def _r1_recovery_risks(s: StreamBatchSettings, limits: BatchLimits | None) -> list[str]:
    """On R1 the server keeps a committing batch under streams/<name>/batches/ and finishes it after
    a restart; what the stream deletes in between is gone, so a hard kill can leave it part-stored."""
    lead = (f"R1 with allow_atomic: a hard kill of the server during a commit leaves the batch to be finished "
            f"from streams/{s.name}/batches/ at restart, but")
    found = []
    if s.retention in ("interest", "workqueue") and not s.consumers:
        found.append(f"{lead} {s.retention} retention with no consumers removes the messages stored before the "
                     "kill, so the batch can end part-stored.")
    timeout = limits.timeout if limits else 10.0
    if 0 < s.max_age < max(SHORT_MAX_AGE, 6 * timeout):
        found.append(f"{lead} max_age {duration(s.max_age)} can age out the messages stored before the kill, so "
                     "the batch can end part-stored.")
    if s.allow_msg_ttl:
        found.append(f"{lead} per-message TTLs can expire messages stored before the kill, so the batch can end "
                     "part-stored.")
    return found
