"""The web app's password check: constant-time, with a bounded number of failed logins a minute.

Panel's basic-auth login compares passwords with `==` and lets a client try for ever; this one
keeps its own handler on Panel's provider.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections import deque

from panel.auth import BasicAuthProvider, BasicLoginHandler

log = logging.getLogger(__name__)

WINDOW = 60.0  # seconds
FAILURES_PER_CLIENT = 5  # failed logins a client address may make in a window
FAILURES_IN_ALL = 50  # and all clients together, so a spread-out guesser is bounded too
MAX_CLIENTS = 10_000


class Failures:
    """Failed logins in the last window, per client address and in all."""

    def __init__(self):
        self.by_client: dict[str, deque[float]] = {}
        self.all: deque[float] = deque()

    def _trim(self, times: deque[float], now: float) -> deque[float]:
        while times and now - times[0] > WINDOW:
            times.popleft()
        return times

    def blocked(self, client: str, now: float) -> bool:
        mine = self._trim(self.by_client.get(client, deque()), now)
        return len(mine) >= FAILURES_PER_CLIENT or len(self._trim(self.all, now)) >= FAILURES_IN_ALL

    def add(self, client: str, now: float) -> None:
        if client not in self.by_client and len(self.by_client) >= MAX_CLIENTS:
            self.by_client = {c: t for c, t in self.by_client.items() if self._trim(t, now)}
        self.by_client.setdefault(client, deque()).append(now)
        self.all.append(now)


def password_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def guarded_login(password: str) -> type[BasicLoginHandler]:
    failures = Failures()

    class GuardedLoginHandler(BasicLoginHandler):
        def _validate(self, username: str, given: str) -> bool:
            now, client = time.monotonic(), self.request.remote_ip or "?"
            if failures.blocked(client, now):
                log.warning("login refused for %s: too many failed logins in the last minute", client)
                return False
            if password_matches(given, password):
                return True
            failures.add(client, now)
            return False

    return GuardedLoginHandler


class GuardedBasicAuth(BasicAuthProvider):
    """Panel's basic-auth provider with the guarded login handler."""

    def __init__(self, password: str, **params):
        self._handler = guarded_login(password)  # before the base class, which asks for it
        super().__init__(**params)

    @property
    def login_handler(self):
        self._handler._login_endpoint = self._login_endpoint
        self._handler._login_template = self._login_template
        return self._handler
