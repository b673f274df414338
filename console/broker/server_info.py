"""What the console learns from the server itself: /varz through the monitor port or the system account."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncGenerator, Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from console.domain.durability import ServerSync, server_sync
from console.domain.publisher import MAX_CONNECTIONS, MalformedPublisher, Publisher, publishers_from_connz
from console.domain.wire import Tally

VARZ_SUBJECT = "$SYS.REQ.SERVER.PING.VARZ"
CONNZ_SUBJECT = "$SYS.REQ.SERVER.PING.CONNZ"

log = logging.getLogger(__name__)


async def read_varz(system_nc: Client | None, monitor_url: str | None) -> tuple[dict[str, Any], str] | None:
    """/varz from the system account, else the monitor URL, and where it was read; None when neither
    is given or answers (each failure logged: not reachable, not allowed)."""
    sources: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = []
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


MONITOR_MOST = 4 << 20  # bytes of a monitoring answer read at most (a real /varz is a few KiB)


class MonitorRefused(Exception):
    """A monitoring answer that is not one: too slow, too large, a redirect, not JSON."""


async def varz_from_monitor(monitor_url: str, timeout: float = 3.0) -> dict[str, Any]:
    """/varz from the monitoring port, whole within `timeout` (a server that drips its answer is cut off
    then) and at most MONITOR_MOST bytes; redirects are not followed (the URL is the operator's, not the
    server's to change)."""
    import httpx

    async def get() -> bytes:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            async with client.stream("GET", f"{monitor_url.rstrip('/')}/varz") as reply:
                if reply.status_code != 200:
                    raise MonitorRefused(f"answered {reply.status_code}")
                body = bytearray()
                async for chunk in reply.aiter_raw():
                    body += chunk
                    if len(body) > MONITOR_MOST:
                        raise MonitorRefused(f"an answer past {MONITOR_MOST:,} bytes")
                return bytes(body)

    try:
        body = await asyncio.wait_for(get(), timeout)
    except asyncio.TimeoutError:
        raise MonitorRefused(f"no whole answer within {timeout:g}s") from None
    except httpx.HTTPError as e:
        raise MonitorRefused(f"{type(e).__name__}: {str(e)[:200]}") from None
    try:
        varz = json.loads(body)
    except ValueError as e:
        raise MonitorRefused(f"not JSON: {str(e)[:100]}") from None
    return varz if isinstance(varz, dict) else {}


async def server_syncs(system_nc: Client | None, monitor_url: str | None,
                       within: float = 1.0) -> tuple[ServerSync, ...] | None:
    """Every server's fsync policy: from each server's /varz through the system account, else the one
    the monitor URL serves; None when neither answers (unchecked, never "fine")."""
    found: dict[str, ServerSync] = {}
    if system_nc is not None:
        try:
            async for msg in _answers(system_nc, VARZ_SUBJECT, b"", within):
                try:
                    answer = json.loads(msg.data)
                except ValueError:
                    continue
                sync = server_sync(answer.get("data") if isinstance(answer, dict) else None)
                if sync is not None and len(found) < 256:
                    found[sync.server] = sync
        except Exception as e:  # the monitor URL, else unchecked
            log.info("the servers' /varz not read through the system account: %r", e)
    if not found and monitor_url:
        try:
            sync = server_sync(await varz_from_monitor(monitor_url))
        except Exception as e:
            log.info("/varz not read from %s: %r", monitor_url, e)
        else:
            if sync is not None:
                found[sync.server] = sync
    return tuple(sorted(found.values(), key=lambda s: s.server)) or None


async def varz_from_system_account(system_nc: Client, timeout: float = 3.0) -> dict[str, Any]:
    """The first server's answer; in a cluster every server answers, with the same limits."""
    reply = await system_nc.request(VARZ_SUBJECT, b"", timeout=timeout)
    answer = json.loads(reply.data)
    varz = answer.get("data") if isinstance(answer, dict) else None
    return varz if isinstance(varz, dict) else {}


async def _answers(system_nc: Client, subject: str, body: bytes, within: float) -> AsyncGenerator[Msg, None]:
    """Every server's answer to a request on the system account, as each comes, for `within` seconds."""
    inbox = system_nc.new_inbox()
    answers: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await system_nc.subscribe(inbox, cb=answers.put)
    try:
        await system_nc.publish(subject, body, reply=inbox)
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            try:
                yield await asyncio.wait_for(answers.get(), left)
            except asyncio.TimeoutError:
                return
    finally:
        await sub.unsubscribe()


async def clusters_of(system_nc: Client, within: float = 1.0) -> dict[str, list[str]]:
    """Every cluster of the system and its servers' client URLs, as each server answers /varz over the
    system account within `within` seconds ({} for a single server or cluster with no name). Each answer
    is read totally: one that does not name a cluster, a host and a port is left out."""
    found: dict[str, set[str]] = {}
    async for msg in _answers(system_nc, VARZ_SUBJECT, b"", within):
        try:
            answer = json.loads(msg.data)
            server, data = answer["server"], answer["data"]
            cluster, host, port = server.get("cluster"), data.get("host"), data.get("port")
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if isinstance(cluster, str) and 0 < len(cluster) <= 256 and isinstance(host, str) and \
                0 < len(host) <= 256 and host not in ("0.0.0.0", "::") and type(port) is int and 0 < port < 65536:
            found.setdefault(cluster, set()).add(f"nats://{'[' + host + ']' if ':' in host else host}:{port}")
    return {cluster: sorted(urls) for cluster, urls in found.items()}


class NoAnswer(Exception):
    """No server answered a question within its time: a busy system, not an answer of nobody."""


async def ask_connz(system_nc: Client, account: str, prefix: str, subject: str, within: float,
                    errors: Tally, exclude: tuple[str | None, int | None] | None = None) -> Publisher | None:
    """The connection of `account` that subscribes under `prefix` and hears `subject`: every server is
    asked at once (on a cluster the publisher is on one of them); the first to name it answers. No
    answer at all within `within` is NoAnswer."""
    # Open connections only: a closed one keeps no subscriptions, and the subject filter does not apply
    # to them (every closed connection of the account would fill the answer).
    body = {"acc": account, "filter_subject": subject, "auth": True, "subscriptions": True, "limit": MAX_CONNECTIONS}
    answers = _answers(system_nc, CONNZ_SUBJECT, json.dumps(body).encode(), within)
    heard = False
    try:
        async for msg in answers:
            if not msg.data and msg.headers and msg.headers.get("Status") == "503":
                continue  # no responders: the connection is not in the system account
            heard = True
            try:
                found = [p for p in publishers_from_connz(msg.data, prefix) if (p.server, p.cid) != exclude]
            except MalformedPublisher as e:
                errors.add(e.reason[:100])
                continue
            if found:
                return found[0]
        if not heard:
            raise NoAnswer(f"no server answered within {within:g} s")
        return None
    finally:
        await answers.aclose()


async def own_account(nc: Client) -> str | None:
    """The account a connection is in, as the server says ($SYS.REQ.USER.INFO), or None."""
    try:
        reply = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)
        data = json.loads(reply.data).get("data") or {}
    except Exception as e:  # an older server, or no permission: the publisher stays unknown
        log.info("the collector's own account is not known (%s): publishers unknown", type(e).__name__)
        return None
    account = data.get("account") if isinstance(data, dict) else None
    return account if isinstance(account, str) and 0 < len(account) <= 256 else None
