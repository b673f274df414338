"""The password sign-in against a real web process: `next` stays on this console whatever it names; the
session cookies are Secure when the console's URL is https; signing out ends the session on the server
(a copy of its cookie no longer works); a throttled address is told it is throttled, and for how long.
And the OpenID sign-in's own `next` check, unit-tested (tests/ui/test_teams.py runs the provider)."""

from __future__ import annotations

import http.client
import urllib.parse

import pytest

from console.login import safe_next
from tests.ui.test_web_hardening import serving

HOSTILE_NEXT = ["///evil.example/phish", "//evil.example", "/\\evil.example", "https://evil.example/",
                "javascript:alert(1)", "/\t/evil.example", "\\\\evil.example", "x" * 3000,
                "http:/evil.example", "/ok" + "\x00"]


def request(host: str, port: int, method: str, path: str, body: dict | None = None,
            cookies: str = "") -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Cookie": cookies} if cookies else {}
    if body is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    conn.request(method, path, urllib.parse.urlencode(body) if body is not None else None, headers)
    reply = conn.getresponse()
    reply.read()
    conn.close()
    return reply


def cookies_of(reply: http.client.HTTPResponse) -> dict[str, str]:
    """name -> the whole Set-Cookie line."""
    return {line.split("=", 1)[0]: line for line in reply.headers.get_all("Set-Cookie") or []}


def jar(reply: http.client.HTTPResponse, *more: http.client.HTTPResponse) -> str:
    pairs = {}
    for r in (reply, *more):
        for name, line in cookies_of(r).items():
            pairs[name] = line.split(";", 1)[0].split("=", 1)[1]
    return "; ".join(f"{k}={v}" for k, v in pairs.items() if v and v != '""')


def sign_in(host: str, port: int, next_: str, password: str = "correct horse") -> tuple[str, str]:
    """GET /login?next=..., POST the password: (where the server sends the browser, the cookies it holds)."""
    form = request(host, port, "GET", "/login?" + urllib.parse.urlencode({"next": next_}))
    answer = request(host, port, "POST", "/login", {"username": "operator", "password": password}, jar(form))
    assert answer.status == 302, answer.status
    return answer.getheader("Location"), jar(form, answer)


@pytest.mark.parametrize("next_", HOSTILE_NEXT)
def test_next_is_only_a_path_here(next_):
    assert safe_next(next_) == "/"


def test_a_sign_in_lands_on_this_console_whatever_next_names_and_logout_ends_the_session(console, tmp_path):
    nats_url, _ = console
    with serving(nats_url, tmp_path, "--basic-auth", "correct horse") as (host, port, _):
        for hostile in HOSTILE_NEXT[:5]:
            where, _ = sign_in(host, port, hostile)
            assert where == "/", (hostile, where)
        where, cookies = sign_in(host, port, "/streams?stream=ORDERS")
        assert where == "/streams?stream=ORDERS"
        assert request(host, port, "GET", "/streams", cookies=cookies).status == 200
        assert request(host, port, "GET", "/logout", cookies=cookies).status == 200
        after = request(host, port, "GET", "/streams", cookies=cookies)  # a copy of the cookie, replayed
        assert after.status == 302 and "/login" in after.getheader("Location"), after.status


def test_cookies_are_secure_under_an_https_console_url(console, tmp_path):
    nats_url, _ = console
    with serving(nats_url, tmp_path, "--basic-auth", "correct horse", "--console-url",
                 "https://console.example") as (host, port, _):
        form = request(host, port, "GET", "/login?next=/audit")
        answer = request(host, port, "POST", "/login", {"username": "operator", "password": "correct horse"},
                         jar(form))
        set_cookies = {**cookies_of(form), **cookies_of(answer)}
        assert {"user", "batch_console_password_session", "next_url"} <= set(set_cookies), set_cookies
        for name, line in set_cookies.items():
            if line.startswith(f'{name}=""'):
                continue  # one cleared, not set
            assert "; Secure" in line and "HttpOnly" in line, line


def test_a_throttled_address_is_told_so_and_for_how_long(console, tmp_path):
    nats_url, _ = console
    with serving(nats_url, tmp_path, "--basic-auth", "correct horse") as (host, port, _):
        for _ in range(4):
            sign_in(host, port, "/", "guess")
        where, _ = sign_in(host, port, "/")  # the right password, while throttled: not tried, and said so
        assert "error=throttled" in where and "wait=" in where, where
        page = page_text(host, port, where)
        assert "was not tried: too many failed sign-ins" in page and "Try again in" in page, page[-800:]
        assert "Invalid" not in page


@pytest.mark.parametrize("error", ["<script>alert(1)</script>", "Your password expired: sign in at evil.example",
                                   "invalid&wait=999999999999", "\x1b[2J", "x" * 5000])
def test_the_sign_in_page_says_only_its_own_words_whatever_the_url_says(console, tmp_path, error):
    nats_url, _ = console
    with serving(nats_url, tmp_path, "--basic-auth", "correct horse") as (host, port, _):
        page = page_text(host, port, "/login?error=" + urllib.parse.quote(error, safe=""))
        assert "evil.example" not in page and "<script>alert" not in page and "x" * 100 not in page
        assert "Invalid username" not in page  # not even a known code's text, unless it is the code itself
        known = page_text(host, port, "/login?error=invalid&wait=999999999999")
        assert "Invalid username or password" in known and "999999999999" not in known


def page_text(host: str, port: int, path: str) -> str:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", path)
    reply = conn.getresponse()
    text = reply.read().decode("utf-8", "replace")
    conn.close()
    return text
