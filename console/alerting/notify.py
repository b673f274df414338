"""Delivering a notice: a webhook POST of its JSON, or the same JSON on a NATS subject. Each target
is retried with backoff; every attempt is kept (bounded) for the Alerts page and logged."""

from __future__ import annotations

import asyncio
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable

from console.broker.connection import Connection, publish
from console.domain.alerting import Notice
from console.domain.notify_targets import NotifyTargets, TargetRefused

log = logging.getLogger(__name__)

BACKOFF = (1.0, 2.0, 4.0, 8.0)  # seconds before each retry
TIMEOUT = 5.0
REFUSED = "refused: "  # the settings do not allow the target
FINAL = (REFUSED, "HTTP 3")  # answers not retried: a refusal, a redirect (never followed)


@dataclass(frozen=True)
class Attempt:
    time: datetime
    rule: str
    stream: str
    status: str  # the notice's: firing | resolved
    target: str
    ok: bool
    answer: str  # the receiver's answer (HTTP status and the start of its body), or the error


class Notifier:
    def __init__(self, nc: Connection, console_url: str | None = None, keep: int = 500,
                 on_attempt: Callable[[Attempt], None] | None = None, targets: NotifyTargets = NotifyTargets()):
        self.nc = nc
        self.targets = targets  # checked again at each send: the rules were checked when read
        self.console_url = console_url.rstrip("/") if console_url else None
        self.attempts: deque[Attempt] = deque(maxlen=keep)
        self.on_attempt = on_attempt  # told of each attempt as it ends

    def link(self, notice: Notice) -> str | None:
        if not self.console_url:
            return None
        if notice.batch_ids:
            return f"{self.console_url}/incident?batch={urllib.parse.quote(notice.batch_ids[0], safe='')}"
        return f"{self.console_url}/"

    async def send(self, notice: Notice) -> None:
        body = json.dumps(notice.to_json(self.link(notice))).encode()
        await asyncio.gather(*(self._deliver(notice, target, body) for target in notice.notify))

    async def _deliver(self, notice: Notice, target: str, body: bytes) -> None:
        for attempt, pause in enumerate((0.0, *BACKOFF)):
            await asyncio.sleep(pause)
            try:
                self.targets.check(target)
            except TargetRefused as e:
                ok, answer = False, f"{REFUSED}{e}"
            else:
                ok, answer = await self._once(target, body)
            tried = Attempt(datetime.now(timezone.utc), notice.rule, notice.stream, notice.status, target, ok, answer)
            self.attempts.append(tried)
            if self.on_attempt is not None:
                self.on_attempt(tried)
            (log.info if ok else log.warning)("%s %s for %s to %s: %s (attempt %d)", notice.rule, notice.status,
                                               notice.stream, target, answer, attempt + 1)
            if ok or answer.startswith(FINAL):  # asking again cannot change these
                return

    async def _once(self, target: str, body: bytes) -> tuple[bool, str]:
        kind, _, where = target.partition(":")
        return await SENDERS[kind](self, where, body)  # the kind was checked: TARGET_KINDS names it


async def _publish(notifier: Notifier, subject: str, body: bytes) -> tuple[bool, str]:
    try:
        await publish(notifier.nc, subject, body, {"Content-Type": "application/json"}, TIMEOUT)
        return True, "published"
    except Exception as e:  # reconnecting, timeout: retried
        return False, f"{type(e).__name__}: {e}"[:300]


async def _webhook(notifier: Notifier, url: str, body: bytes) -> tuple[bool, str]:
    return await asyncio.to_thread(_post, notifier.targets, url, body)


# One sender per kind of target (console.domain.notify_targets.TARGET_KINDS)
SENDERS: dict[str, Callable[[Notifier, str, bytes], Awaitable[tuple[bool, str]]]] = {"nats": _publish,
                                                                                     "webhook": _webhook}


def _post(targets: NotifyTargets, url: str, body: bytes) -> tuple[bool, str]:
    """One POST to the one address the URL's host resolves to now, checked before it is reached (a name
    that resolves to a listed host at parse time and elsewhere at send time gets nothing); a redirect
    is an answer, never followed."""
    try:
        host, port = targets.webhook_host(url)
        address = _resolve(host, port)
        targets.address(address, host)
    except TargetRefused as e:
        return False, f"{REFUSED}{e}"
    except OSError as e:
        return False, f"{type(e).__name__}: {e}"[:300]
    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    connection = _PinnedHTTPS(host, port, str(address)) if parts.scheme == "https" else _Pinned(host, port, str(address))
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json", "Host": parts.netloc})
        reply = connection.getresponse()
        text = reply.read(200).decode(errors="replace")
        if 300 <= reply.status < 400:
            return False, f"HTTP {reply.status}: a redirect, not followed"
        if 200 <= reply.status < 300:
            return True, f"HTTP {reply.status}"
        return False, f"HTTP {reply.status}: {text}"
    except (OSError, http.client.HTTPException, ValueError) as e:
        return False, f"{type(e).__name__}: {e}"[:300]
    finally:
        connection.close()


def _resolve(host: str, port: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The first address the host resolves to: the only one it is sent to."""
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    return ipaddress.ip_address(sockaddr[0])


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to an address checked beforehand, whatever the name resolves to by then."""

    def __init__(self, host: str, port: int, address: str):
        super().__init__(host, port, timeout=TIMEOUT)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPS(_Pinned):
    def connect(self) -> None:
        super().connect()
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.host)
