"""What each nats-server release does with batches, as the version matrix found it (tests/vectors/<version>/,
tests/integration/test_server_versions.py): the features a release has, and what a release does that
ADR-50 does not say. The console offers only what the server has, and warns of what it gets wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, int, int]
_VERSION = re.compile(r"^v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-+][0-9A-Za-z.-]{0,64})?$")


def release(text: object) -> Release | None:
    """2.14.6 -> (2, 14, 6); None for anything that is not a release number (the wire is hostile)."""
    if not isinstance(text, str) or not (m := _VERSION.match(text.strip())):
        return None
    return int(m[1]), int(m[2]), int(m[3])


def shown(r: Release) -> str:
    return ".".join(map(str, r))


@dataclass(frozen=True)
class Feature:
    name: str
    since: Release
    what: str  # what an operator of an older server misses, in a sentence


FEATURES = {f.name: f for f in (
    Feature("atomic", (2, 12, 0), "atomic batch publishing (allow_atomic)"),
    Feature("fast_ingest", (2, 14, 0), "fast-ingest batches (allow_batched): a stream refuses the flag (10025)"),
    Feature("eob_commit", (2, 14, 0), "the end-of-batch commit (Nats-Batch-Commit: eob is refused with 10200)"),
    Feature("unsupported_advisory", (2, 14, 0),
            "a batch_abandoned advisory for an atomic batch refused for its required API level (10185 goes to "
            "the publisher only)"),
)}
# The release from which the console knows a batch limit's default (batch_limits.DEFAULTS) for a server
# whose /varz leaves it out: the in-flight cap per stream and the batch size were measured on 2.12.8,
# 2.14.6 and 2.15.1 (50 and 1000); the timeout and the per-server cap are ADR-50's, as of 2.14.
DEFAULTS_KNOWN_SINCE: dict[str, Release] = {"max_batch_timeout": (2, 14, 0), "max_batch_inflight_total": (2, 14, 0),
                                            "max_batch_inflight_per_stream": (2, 12, 0), "max_batch_size": (2, 12, 0)}
# The API level each stream flag requires (the server writes it as _nats.req.level).
FLAG_LEVELS = {"allow_atomic": 2, "allow_batched": 4}


@dataclass(frozen=True)
class Divergence:
    """A place where releases do not do what ADR-50 says: the ones affected, a runnable reproduction."""

    id: str
    title: str
    first: Release
    last: Release | None  # the last release known to do it; None: up to the newest one tested
    adr_says: str
    server_does: str
    repro: str  # scripts/repro/<file>
    streams: str = "any"  # the streams it concerns: "any", or those with this flag on ("allow_atomic", ...)
    replicated: bool = False  # only streams with more than one replica

    def concerns(self, flags: dict[str, bool], replicas: int) -> bool:
        return (self.streams == "any" or flags.get(self.streams, False)) and (replicas > 1 or not self.replicated)

    def affects(self, r: Release) -> bool:
        return self.first <= r and (self.last is None or r[:2] <= self.last[:2])

    def versions(self) -> str:
        return f"{shown(self.first)} and later" if self.last is None else f"{shown(self.first)} to {shown(self.last)}"


DIVERGENCES = (
    Divergence("sequence-not-a-number", "a batch sequence that is not a number is called too large",
               (2, 12, 0), (2, 12, 8),
               "a Nats-Batch-Sequence that is missing or not a number is refused with 10175 (sequence is missing)",
               "10199 'atomic publish batch is too large: <max>' (the publisher is told to make smaller batches)",
               "sequence_not_a_number.py", "allow_atomic"),
    Divergence("inflight-limit-called-incomplete", "a batch over the in-flight limit is called incomplete",
               (2, 12, 0), (2, 12, 8),
               "a first message that would open one batch too many on the stream is refused with 10210 (too many "
               "in-flight atomic batches): the publisher should back off and retry",
               "10176 'atomic publish batch is incomplete', which reads as a gap: nothing says to back off",
               "inflight_limit_called_incomplete.py", "allow_atomic"),
    Divergence("fast-on-old-server", "fast-ingest messages to a server without fast ingest are stored as plain messages",
               (2, 12, 0), (2, 12, 8),
               "a server that cannot take a fast batch refuses it (10205 on a stream without allow_batched)",
               "each message is stored on any stream that binds its subject and answered with a plain PubAck, "
               "without a batch, a flow or a commit: a fast publisher that reads the reply as a flow ack sees none",
               "fast_on_a_server_without_fast_ingest.py"),
)


TOO_MANY_INFLIGHT, INCOMPLETE = 10210, 10176


def first_message_over_the_limit(err_code: int) -> bool:
    """Whether a refusal of a batch's first (not committing) message means too many batches open on the
    stream: 10210, or as 2.12 says it, 10176 (a first message cannot otherwise be incomplete)."""
    return err_code in (TOO_MANY_INFLIGHT, INCOMPLETE)


@dataclass(frozen=True)
class ServerRelease:
    """The server the console talks to: its version and JetStream API level, as it said them."""

    version: str  # as the server gave it (INFO, /varz or a stream's _nats.ver)
    api_level: int | None  # $JS.API.INFO's api.level (None: not said)

    @property
    def release(self) -> Release | None:
        return release(self.version)

    def has(self, feature: str) -> bool | None:
        """None when the version is not a release number: nothing is assumed either way."""
        r = self.release
        return None if r is None else r >= FEATURES[feature].since

    def lacks(self) -> list[Feature]:
        return [f for f in FEATURES.values() if self.has(f.name) is False]

    def divergences(self) -> list[Divergence]:
        r = self.release
        return [] if r is None else [d for d in DIVERGENCES if d.affects(r)]

    def missing_for(self, flag: str) -> str | None:
        """Why this server cannot take a stream flag, or None (it can, or it cannot be told)."""
        if flag == "allow_batched" and self.has("fast_ingest") is False:
            return f"nats-server {self.version} has no fast ingest: allow_batched needs 2.14 or later (API level 4)"
        level = FLAG_LEVELS.get(flag)
        if level is not None and self.api_level is not None and self.api_level < level:
            return f"{flag} needs JetStream API level {level}; nats-server {self.version} is at level {self.api_level}"
        return None
