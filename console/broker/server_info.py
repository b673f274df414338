"""What the console learns from the server itself: /varz through the monitor port or the system account."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request

from nats.aio.client import Client

DEFAULT_BATCH_TIMEOUT = 10.0  # seconds; /varz omits max_batch_timeout when it is the default
VARZ_SUBJECT = "$SYS.REQ.SERVER.PING.VARZ"

log = logging.getLogger(__name__)


async def read_varz(system_nc: Client | None, monitor_url: str | None) -> tuple[dict, str] | None:
    """/varz from the system account, else the monitor URL, and where it was read; None when neither
    is given or answers (each failure logged: not reachable, not allowed)."""
    sources = []
    if system_nc is not None:
        sources.append(("the system account's /varz", lambda: varz_from_system_account(system_nc)))
    if monitor_url:
        sources.append((f"{monitor_url}/varz", lambda: varz_from_monitor(monitor_url)))
    for name, fetch in sources:
        try:
            return await fetch(), name
        except Exception as e:  # the next one, else none
            log.info("/varz not read from %s: %r", name, e)
    return None


async def varz_from_monitor(monitor_url: str, timeout: float = 3.0) -> dict:
    def get() -> dict:
        with urllib.request.urlopen(f"{monitor_url.rstrip('/')}/varz", timeout=timeout) as reply:
            return json.load(reply)

    return await asyncio.to_thread(get)


async def varz_from_system_account(system_nc: Client, timeout: float = 3.0) -> dict:
    """The first server's answer; in a cluster every server answers, with the same limits."""
    reply = await system_nc.request(VARZ_SUBJECT, b"", timeout=timeout)
    return json.loads(reply.data).get("data") or {}
