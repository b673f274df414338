"""The OpenID provider's access tokens on /api/v1 (`--oidc-api-audience`), from a real provider (panva's
oidc-provider, npm): machines take RFC 9068 JWTs by client credentials, and their groups are their roles
as a signed-in user's are. Refused, each audited: a token for another audience, one of another issuer
(signed with the same development key: only the issuer tells them apart), one whose claims were changed,
and one unsigned (alg none)."""

from __future__ import annotations

import base64
import json
import subprocess

import httpx
import pytest

from console.config import WebSettings, env_name
from tests.api_console import Console, running_console
from tests.waits import poll_until
from tests.oidc_provider import CLIENT, MACHINE_SECRET, SECRET, start_provider
from tests.processes import CLI

AUDIENCE, OTHER_AUDIENCE = "urn:batch-console:api", "urn:another:api"
MACHINES = {"ops-bot": ["console-admins"], "watch-bot": ["console-viewers"], "stranger": ["staff"]}


@pytest.fixture(scope="module")
def provided(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api-oidc")
    procs: list[subprocess.Popen] = []
    resources = {AUDIENCE: 3600, OTHER_AUDIENCE: 3600}
    try:
        issuer = start_provider(tmp, "provider", [], procs, {}, MACHINES, resources)
        other = start_provider(tmp, "other-provider", [], procs, {}, MACHINES, resources)
        env = {"BATCH_CONSOLE_OIDC_ISSUER": issuer, "BATCH_CONSOLE_OIDC_CLIENT_ID": CLIENT,
               "BATCH_CONSOLE_OIDC_CLIENT_SECRET": SECRET, "BATCH_CONSOLE_OIDC_API_AUDIENCE": AUDIENCE,
               env_name(WebSettings, "refusals_every"): "2"}
        (tmp / "console").mkdir()
        with running_console(tmp / "console", env=env) as console:
            yield console, issuer, other
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)


def access_token(issuer: str, machine: str, audience: str = AUDIENCE) -> str:
    answer = httpx.post(f"{issuer}/token", auth=(machine, MACHINE_SECRET), timeout=30,
                        data={"grant_type": "client_credentials", "resource": audience, "scope": "api"})
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def as_bearer(console: Console, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, console.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw)


def _trail(console: Console) -> list[dict]:
    admin = {"Authorization": f"Bearer {console.tokens['admin']}"}
    return httpx.get(console.url + "/audit?limit=1000", headers=admin, timeout=30).json()["records"]


def test_a_machines_groups_are_its_roles_and_its_actions_name_it(provided):
    console, issuer, _ = provided
    ops, watch, stranger = (access_token(issuer, m) for m in ("ops-bot", "watch-bot", "stranger"))
    assert as_bearer(console, ops, "GET", "/systems").status_code == 200
    done = as_bearer(console, ops, "PATCH", "/streams/TEAM_A", json={"allow_batched": False})
    assert done.status_code == 200 and done.json()["allow_batched"] is False
    assert as_bearer(console, watch, "PATCH", "/streams/TEAM_A", json={"allow_batched": True}).status_code == 403
    assert as_bearer(console, watch, "GET", "/streams/TEAM_A").json()["allow_batched"] is False
    assert as_bearer(console, stranger, "GET", "/streams").json() == []  # no group maps: no role, no stream
    assert as_bearer(console, ops, "PATCH", "/streams/TEAM_A", json={"allow_batched": True}).status_code == 200
    edits = {(r["user"], r["outcome"]) for r in _trail(console) if r["action"] == "stream.edit"}
    assert {("oidc:ops-bot", "accepted"), ("oidc:watch-bot", "refused: role")} <= edits


def _forged(token: str, **claims: object) -> str:
    header, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    changed = base64.urlsafe_b64encode(json.dumps({**body, **claims}).encode()).decode().rstrip("=")
    return f"{header}.{changed}.{signature}"


def test_a_token_for_another_audience_issuer_or_forged_is_refused_and_audited(provided):
    console, issuer, other = provided
    watch = access_token(issuer, "watch-bot")
    unsigned = ".".join(base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=") for part in (
        {"alg": "none", "typ": "at+jwt"}, {"iss": issuer, "aud": AUDIENCE, "sub": "ops-bot", "exp": 4102444800,
                                          "groups": ["console-admins"]})) + "."
    refused = {"another audience": access_token(issuer, "ops-bot", OTHER_AUDIENCE),
               "another issuer": access_token(other, "ops-bot"),
               "claims changed": _forged(watch, groups=["console-admins"]),
               "unsigned": unsigned, "not a JWT": "x" * 100, "too long": "a.b." + "c" * 10_000}
    for what, token in refused.items():
        answer = as_bearer(console, token, "PATCH", "/streams/TEAM_A", json={"allow_batched": False})
        assert answer.status_code == 401, (what, answer.text)
        assert token not in answer.text

    def counted() -> int:  # written at once, or counted in a summary of the window (2 s here)
        records = _trail(console)
        summaries = [json.loads(r["detail"]) for r in records if r["action"] == "refusals"]
        return sum(1 for r in records if r["user"] == "api (access token)") + sum(
            s["by_who"].get("api (access token)", 0) for s in summaries)

    poll_until(lambda: counted() >= len(refused), 30, "every refusal counted")
    said = "".join(r["detail"] for r in _trail(console))
    assert not any(token in said for token in refused.values())


def test_an_audience_without_a_provider_is_refused_at_start(tmp_path):
    done = subprocess.run([CLI, "serve", "--data-dir", str(tmp_path), "--oidc-api-audience", AUDIENCE, "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--oidc-api-audience" in done.stderr and "Traceback" not in done.stderr
