"""What the console learns from the server itself: /varz through the monitor port or the system account."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from nats.aio.client import Client

DEFAULT_BATCH_TIMEOUT = 10.0  # seconds; /varz omits max_batch_timeout when it is the default
VARZ_SUBJECT = "$SYS.REQ.SERVER.PING.VARZ"


def batch_timeout_from_varz(varz: dict) -> float:
    nanos = ((varz.get("jetstream") or {}).get("limits") or {}).get("max_batch_timeout")
    return nanos / 1e9 if isinstance(nanos, (int, float)) and nanos > 0 else DEFAULT_BATCH_TIMEOUT


async def varz_from_monitor(monitor_url: str, timeout: float = 3.0) -> dict:
    def get() -> dict:
        with urllib.request.urlopen(f"{monitor_url.rstrip('/')}/varz", timeout=timeout) as reply:
            return json.load(reply)

    return await asyncio.to_thread(get)


async def varz_from_system_account(system_nc: Client, timeout: float = 3.0) -> dict:
    """The first server's answer; in a cluster every server answers, with the same limits."""
    reply = await system_nc.request(VARZ_SUBJECT, b"", timeout=timeout)
    return json.loads(reply.data).get("data") or {}
