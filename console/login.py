"""The web app's password sign-in: constant-time, with failed logins slowed per client address (a
throttled one is told so, and for how long); sessions the server ends at sign-out; a `next` that stays
on this console; cookies Secure over https.

Panel's basic-auth login compares passwords with `==` and lets a client try for ever; this one
keeps its own handler on Panel's provider. An address that fails must wait longer after each failure
(exponential backoff); when many addresses fail at once, only those that have failed are refused, so
an attacker can slow only itself, never lock the operator out.
"""

from __future__ import annotations

import hmac
import html
import logging
import math
import secrets
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit
from typing import Any

from panel.auth import BasicAuthProvider, BasicLoginHandler
from panel.io.resources import CDN_DIST
from tornado.web import RequestHandler

log = logging.getLogger(__name__)

WINDOW = 60.0  # seconds
FREE_FAILURES = 3  # failed logins an address may make before it must wait
MAX_WAIT = 900.0  # seconds: the longest an address is made to wait
FORGET_AFTER = 3600.0  # seconds without a failure: the address starts afresh
FAILURES_IN_ALL = 50  # in a window, all addresses together: past it, any address that has failed waits it out
MAX_CLIENTS = 10_000
MAX_NEXT = 2000  # characters of a path to go to after signing in
SESSION_DAYS = 1
SESSION_COOKIE = "batch_console_password_session"
NEXT_COOKIE = "next_url"


@dataclass
class Record:
    failures: int  # in a row (a success clears them)
    last: float  # the last failure


class Failures:
    """Failed logins per client address (in a row), and of all addresses in the last window."""

    def __init__(self) -> None:
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


def safe_next(text: str | None) -> str:
    """Where a sign-in goes once done: a path on this console only (one leading slash, no scheme, no
    host, no backslash, no control character, which browsers drop and then read `/\t/host` as a host),
    else "/". Panel's own check let `///host` through, which a browser reads as another host."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_NEXT or not text.startswith("/") \
            or text[1:2] in ("/", "\\") or "\\" in text or any(ord(c) < 33 or ord(c) == 127 for c in text):
        return "/"
    parts = urlsplit(text)
    return "/" if parts.scheme or parts.netloc else text


def cookie_flags(handler: RequestHandler, console_url: str | None) -> dict[str, Any]:
    """A session cookie's flags: Secure whenever the console is reached over https (or its public URL,
    behind a proxy, is one)."""
    https = handler.request.protocol == "https" or (console_url or "").lower().startswith("https://")
    return {"httponly": True, "samesite": "Lax", "path": "/", "secure": https}


def page(handler: RequestHandler, status: int, title: str, text: str, link: str = "") -> None:
    """A small page of the sign-in's own (refused, signed out), escaped, never cached."""
    handler.set_status(status)
    handler.set_header("Content-Type", "text/html; charset=utf-8")
    handler.set_header("Cache-Control", "no-store")
    more = f'<p><a href="{html.escape(link)}">Sign in again</a></p>' if link else ""
    handler.finish(f"<!doctype html><title>{html.escape(title)}</title><h1>{html.escape(title)}</h1>"
                   f"<p>{html.escape(text)}</p>{more}")


SIGN_IN_ERRORS = {"invalid": "Invalid username or password",
                  "throttled": "Your sign-in was not tried: too many failed sign-ins from your address. Try again in "
                               "{wait} s (each try before then makes the wait longer)"}
MAX_WAIT_SAID = 86_400


def sign_in_error(code: str, wait: str) -> str:
    """What the sign-in page says for the `error` its own redirect named: one of its own texts, never the
    URL's (a link to /login?error=ANY TEXT showed that text on the console's own page)."""
    text = SIGN_IN_ERRORS.get(code, "")
    seconds = int(wait) if wait.isascii() and wait.isdigit() and len(wait) <= 6 else 0
    return text.format(wait=min(seconds, MAX_WAIT_SAID) or "a few")


class Sessions:
    """Password sign-ins as the server knows them: a copied cookie stops working at sign-out."""

    def __init__(self, most: int = 10_000):
        self.until: dict[str, float] = {}
        self.most = most

    def start(self, now: float) -> str:
        if len(self.until) >= self.most:
            self.until = {sid: t for sid, t in self.until.items() if t > now}
            while len(self.until) >= self.most:  # all live: the oldest go
                self.until.pop(next(iter(self.until)))
        sid = secrets.token_urlsafe(24)
        self.until[sid] = now + SESSION_DAYS * 86400
        return sid

    def live(self, sid: str | None, now: float) -> bool:
        return sid is not None and self.until.get(sid, 0.0) > now

    def end(self, sid: str | None) -> None:
        self.until.pop(sid or "", None)


def guarded_login(password: str, sessions: Sessions, console_url: str | None) -> type[BasicLoginHandler]:
    failures = Failures()

    class GuardedLoginHandler(BasicLoginHandler):
        def get(self) -> None:
            self.set_cookie(NEXT_COOKIE, safe_next(self.get_argument("next", "/")),
                            **cookie_flags(self, console_url))
            self.write(self._login_template.render(login_endpoint=self._login_endpoint,
                                                   errormessage=sign_in_error(self.get_argument("error", ""),
                                                                              self.get_argument("wait", "")),
                                                   PANEL_CDN=CDN_DIST))

        def post(self) -> None:
            now, client = time.monotonic(), self.request.remote_ip or "?"
            if (wait := failures.wait(client, now)) > 0:
                log.warning("login refused for %s: %d failed logins, next try in %.0fs", client,
                            failures.by_client[client].failures, wait)
                failures.add(client, now)  # a guesser that does not wait makes its own wait longer
                wait = failures.wait(client, now)
                return self._again("throttled", math.ceil(wait))
            if not password_matches(self.get_argument("password", ""), password):
                failures.add(client, now)
                return self._again("invalid")
            failures.succeeded(client)
            user = self.get_argument("username", "")[:256] or "?"
            flags = cookie_flags(self, console_url)
            self.set_signed_cookie(SESSION_COOKIE, sessions.start(time.time()), expires_days=SESSION_DAYS, **flags)
            self.set_signed_cookie("user", user, expires_days=SESSION_DAYS, **flags)
            self.clear_cookie("is_guest")
            self.redirect(safe_next(self.get_cookie(NEXT_COOKIE, "/")))

        def _again(self, why: str, wait: int = 0) -> None:
            self.redirect(f"{self._login_endpoint}?error={why}" + (f"&wait={wait}" if wait else ""))

    return GuardedLoginHandler


class GuardedBasicAuth(BasicAuthProvider):
    """Panel's basic-auth provider with the guarded login handler, sessions the server can end, and a
    `next` that stays on this console."""

    def __init__(self, password: str, console_url: str | None = None, **params: Any) -> None:
        self.sessions = Sessions()
        self._handler = guarded_login(password, self.sessions, console_url)  # before the base class asks for it
        super().__init__(**params)  # type: ignore[no-untyped-call]  # param's constructor has no types

    @property
    def login_handler(self) -> Any:
        self._handler._login_endpoint = self._login_endpoint
        self._handler._login_template = self._login_template
        return self._handler

    @property
    def get_user(self) -> Any:
        sessions = self.sessions

        def get_user(handler: RequestHandler) -> str | None:
            sid = handler.get_signed_cookie(SESSION_COOKIE, max_age_days=SESSION_DAYS)
            if not sessions.live(sid.decode() if sid else None, time.time()):
                return None
            user = handler.get_signed_cookie("user", max_age_days=SESSION_DAYS)
            return user.decode() if user else None
        return get_user

    @property
    def logout_handler(self) -> Any:
        sessions = self.sessions

        class SignOut(RequestHandler):
            def get(self) -> None:
                sid = self.get_signed_cookie(SESSION_COOKIE, max_age_days=SESSION_DAYS)
                sessions.end(sid.decode() if sid else None)
                for name in (SESSION_COOKIE, "user", "id_token", NEXT_COOKIE):
                    self.clear_cookie(name, path="/")
                page(self, 200, "Signed out", "You are signed out of the console.", "/login")
        return SignOut
