"""What a committed batch is worth on disk: each server's fsync policy as its /varz says it
(`jetstream.config.sync_always`, `sync_interval` in nanoseconds; verified on nats-server 2.15.1: the
default reports `sync_interval` 120000000000 and no `sync_always`, `sync_interval: always` adds
`"sync_always": true`). A server that does not sync always acknowledges a commit that is in its page
cache only: Jepsen's analysis of NATS 2.12.1 lost acknowledged writes under power failure this way.
Read totally: /varz is a server's answer, and odd values are "not known", never "safe"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.domain.wire import MAX_LABEL, has_control

DEFAULT_INTERVAL_S = 120.0  # nats-server's default sync_interval (2 minutes), reported as such


@dataclass(frozen=True)
class ServerSync:
    server: str
    always: bool
    interval_s: float | None  # None: not reported in a form read here

    def said(self) -> str:
        if self.always:
            return f"{self.server} syncs every write (sync_interval: always)"
        every = "an interval it does not report" if self.interval_s is None else _duration(self.interval_s)
        return f"{self.server} flushes to disk every {every}"


def server_sync(varz: Any) -> ServerSync | None:
    """A server's fsync policy from its /varz, or None when the answer is not one (no JetStream, odd types)."""
    if not isinstance(varz, dict):
        return None
    name = varz.get("server_name") or varz.get("server_id")
    js = varz.get("jetstream")
    config = js.get("config") if isinstance(js, dict) else None
    if not isinstance(name, str) or not 0 < len(name) <= MAX_LABEL or has_control(name) or not isinstance(config, dict):
        return None
    always = config.get("sync_always") is True
    raw = config.get("sync_interval")
    interval = raw / 1e9 if type(raw) is int and 0 < raw < 10**18 else DEFAULT_INTERVAL_S if raw is None else None
    return ServerSync(name, always, interval)


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
