"""The web app's password check: constant-time, with failed logins slowed per client address.

Panel's basic-auth login compares passwords with `==` and lets a client try for ever; this one
keeps its own handler on Panel's provider. An address that fails must wait longer after each failure
(exponential backoff); when many addresses fail at once, only those that have failed are refused, so
an attacker can slow only itself, never lock the operator out.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections import deque
from dataclasses import dataclass

from panel.auth import BasicAuthProvider, BasicLoginHandler

log = logging.getLogger(__name__)

WINDOW = 60.0  # seconds
FREE_FAILURES = 3  # failed logins an address may make before it must wait
MAX_WAIT = 900.0  # seconds: the longest an address is made to wait
FORGET_AFTER = 3600.0  # seconds without a failure: the address starts afresh
FAILURES_IN_ALL = 50  # in a window, all addresses together: past it, any address that has failed waits it out
MAX_CLIENTS = 10_000


@dataclass
class Record:
    failures: int  # in a row (a success clears them)
    last: float  # the last failure


class Failures:
    """Failed logins per client address (in a row), and of all addresses in the last window."""

    def __init__(self):
        self.by_client: dict[str, Record] = {}
        self.all: deque[float] = deque()

    def wait(self, client: str, now: float) -> float:
        """Seconds this address must still wait before its password is checked (0: now)."""
        record = self.by_client.get(client)
        if record is None or now - record.last > FORGET_AFTER:
            return 0.0
        backoff = 0.0 if record.failures < FREE_FAILURES else min(2.0 ** (record.failures - FREE_FAILURES + 1), MAX_WAIT)
        remaining = record.last + backoff - now
        while self.all and now - self.all[0] > WINDOW:
            self.all.popleft()
        if len(self.all) >= FAILURES_IN_ALL:  # a spread-out guesser: whoever failed waits for the window
            remaining = max(remaining, self.all[0] + WINDOW - now)
        return max(0.0, remaining)

    def add(self, client: str, now: float) -> None:
        if client not in self.by_client and len(self.by_client) >= MAX_CLIENTS:
            self.by_client = {c: r for c, r in self.by_client.items() if now - r.last <= FORGET_AFTER}
            if len(self.by_client) >= MAX_CLIENTS:  # all recent: the quietest go
                for c in sorted(self.by_client, key=lambda c: self.by_client[c].last)[:MAX_CLIENTS // 10]:
                    del self.by_client[c]
        record = self.by_client.get(client)
        if record is None or now - record.last > FORGET_AFTER:
            record = self.by_client[client] = Record(0, now)
        record.failures += 1
        record.last = now
        self.all.append(now)

    def succeeded(self, client: str) -> None:
        self.by_client.pop(client, None)


def password_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def guarded_login(password: str) -> type[BasicLoginHandler]:
    failures = Failures()

    class GuardedLoginHandler(BasicLoginHandler):
        def _validate(self, username: str, given: str) -> bool:
            now, client = time.monotonic(), self.request.remote_ip or "?"
            if (wait := failures.wait(client, now)) > 0:
                log.warning("login refused for %s: %d failed logins, next try in %.0fs", client,
                            failures.by_client[client].failures, wait)
                failures.add(client, now)  # a guesser that does not wait makes its own wait longer
                return False
            if password_matches(given, password):
                failures.succeeded(client)
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
