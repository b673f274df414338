"""No secret reaches a log line: the settings' own secrets, and a token sent by mistake in a URL (the web's
access log writes the URL of every refused request, its query too)."""

from __future__ import annotations

import logging

import pytest

from console.redaction import HIDDEN, Redactor

TOKEN = "bct_" + "Ab3-_x" * 7 + "z"


@pytest.mark.parametrize("line, kept", [
    (f"401 GET /api/v1/systems?token={TOKEN} (127.0.0.1) 2.1ms", "401 GET /api/v1/systems?token="),
    (f"401 GET /x?system=eu&access_token=eyJhbGciOi.payload.sig&y=1 (::1)", "/x?system=eu&access_token="),
    ("302 GET /oidc/callback?code=SplxlOBeZQQYbYS6WxSbIA&state=af0ifjsldkj", "/oidc/callback?code="),
    (f"bearer {TOKEN} in a header someone logged", "bearer bct_"),
    ("GET /?PASSWORD=hunter2hunter2;next=/", "/?PASSWORD="),
])
def test_a_secret_in_a_logged_url_is_hidden(line, kept):
    record = logging.LogRecord("tornado.access", logging.WARNING, __file__, 1, "%s", (line,), None)
    Redactor(["settings-secret"]).filter(record)
    said = record.getMessage()
    assert kept in said and HIDDEN in said
    for secret in (TOKEN, "eyJhbGciOi", "SplxlOBeZQQYbYS6WxSbIA", "hunter2"):
        assert secret not in said


def test_a_plain_query_is_left_as_it_is():
    record = logging.LogRecord("tornado.access", logging.INFO, __file__, 1, "%s", ("200 GET /stream?name=ORDERS&system=eu",), None)
    Redactor([]).filter(record)
    assert record.getMessage() == "200 GET /stream?name=ORDERS&system=eu"
