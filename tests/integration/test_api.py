"""/api/v1 on a real console (a nats-server, a collector, `serve`): the OpenAPI document validates; every
endpoint refuses a call without a valid token (none, unknown, forged, revoked, expired), each refusal
audited; a role acts through the same actions as a page (a viewer's edit refused, an admin's applied and
audited with the token's name); a role limited to TEAM_* reads and changes nothing of another stream;
hostile parameters are refused with problem details, never a 5xx."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon
from tests.processes import CLI, free_port, wait_http
from tests.waits import collector_ready, poll_until

ROLES = """
[[role]]
name = "team"
actions = ["stream.edit"]
streams = ["TEAM_*"]
"""
PROBLEM = "application/problem+json"
MASK = '[[mask]]\nstreams = ["TEAM_*"]\nfields = ["card.number"]\n'
SECRET = "4111111111111111"


@dataclass
class Console:
    url: str
    nats: str
    tokens: dict[str, str]
    data: Path


def token(data: Path, roles: Path, *args: str) -> str:
    done = subprocess.run([CLI, "token", *args, "--data-dir", str(data), "--roles", str(roles)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


async def _seed(url: str, collector) -> None:
    nc = await nats.connect(url)
    await collector_ready(nc.jetstream(), collector)
    for name in ("TEAM_A", "OTHER"):
        await nc.jetstream().add_stream(name=name, subjects=[name.lower()], allow_atomic=True, allow_batched=True)
    for i in range(3):
        await nc.jetstream().publish("team_a", f'{{"n": {i}, "card": {{"number": "{SECRET}"}}}}'.encode())
    await abandon(nc, "API_LOSS", "api-loss")
    await nc.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    data, roles, mask = tmp / "data", tmp / "roles.toml", tmp / "mask.toml"
    roles.write_text(ROLES)
    mask.write_text(MASK)
    with EmbeddedServer(tmp / "nats", batch_limits=TEST_LIMITS) as server:
        tokens = {role: token(data, roles, "create", "--name", f"{role}-bot", "--role", role)
                  for role in ("admin", "viewer", "team")}
        tokens["revoked"] = token(data, roles, "create", "--name", "gone", "--role", "admin")
        token(data, roles, "revoke", "gone")
        tokens["expired"] = token(data, roles, "create", "--name", "brief", "--role", "admin", "--expires", "1s")
        tokens["fuzz"] = token(data, roles, "create", "--name", "fuzz", "--role", "operator", "--rate", "10000")
        port = free_port()
        procs = [subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", str(data)],
                                  stdout=open(tmp / "collector.log", "w"), stderr=subprocess.STDOUT),
                 subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(data),
                                   "--roles", str(roles), "--mask-rules", str(mask)], stdout=open(tmp / "web.log", "w"),
                                  stderr=subprocess.STDOUT)]
        try:
            wait_http(f"http://127.0.0.1:{port}/", procs[1], tmp / "web.log")
            asyncio.run(_seed(server.url, procs[0]))
            yield Console(f"http://127.0.0.1:{port}/api/v1", server.url, tokens, data)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=20)


def call(console: Console, method: str, path: str, who: str | None = "admin", **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {console.tokens[who]}"} if who in console.tokens else \
        {"Authorization": who} if who else {}
    return httpx.request(method, console.url + path, headers=headers, timeout=30, **kw)


def test_the_openapi_document_validates_and_names_the_paths_a_script_counts_on(console):
    document = httpx.get(console.url + "/openapi.json", timeout=30).json()
    validate(document)
    paths = document["paths"]
    for path, method in (("/api/v1/losses", "get"), ("/api/v1/streams/{name}", "get"),
                         ("/api/v1/streams/{name}", "patch"), ("/api/v1/checks", "get"),
                         ("/api/v1/incidents/{batch_id}", "get")):
        assert method in paths[path], path
    docs = httpx.get(console.url + "/docs", timeout=30)
    assert docs.status_code == 200 and "PATCH" in docs.text and "<script" not in docs.text


def test_every_endpoint_refuses_a_call_without_a_valid_token_and_audits_it(console):
    document = httpx.get(console.url + "/openapi.json", timeout=30).json()
    poll_until(lambda: call(console, "GET", "/systems", "expired").status_code == 401, 10, "the token expired")
    forged = "bct_" + "A" * 43
    for path, operations in document["paths"].items():
        concrete = path.removeprefix("/api/v1").replace("{name}", "TEAM_A").replace("{batch_id}", "api-loss")
        for method in operations:
            for who in (None, "Bearer", "Basic YWRtaW46YWRtaW4=", f"Bearer {forged}", "revoked", "expired"):
                answer = call(console, method.upper(), concrete, who, json={} if method == "patch" else None)
                assert answer.status_code == 401, (method, path, who, answer.text)
                assert answer.headers["content-type"].startswith(PROBLEM) and answer.json()["status"] == 401
    trail = call(console, "GET", "/audit?limit=1000").json()
    refused = [r for r in trail["records"] if r["outcome"] == "refused: unauthenticated"]
    assert {r["user"] for r in refused} >= {"api (no token)", "api (unknown token)", "token:gone", "token:brief"}
    assert trail["intact"]


def test_an_edit_goes_through_the_actions_as_a_pages_does(console):
    refused = call(console, "PATCH", "/streams/TEAM_A", "viewer", json={"allow_batched": False})
    assert refused.status_code == 403 and "stream.edit" in refused.json()["detail"]
    done = call(console, "PATCH", "/streams/TEAM_A", "admin", json={"allow_batched": False})
    assert done.status_code == 200 and done.json()["allow_batched"] is False
    assert call(console, "GET", "/streams/TEAM_A", "viewer").json()["allow_batched"] is False  # on the server
    server_says = call(console, "PATCH", "/streams/TEAM_A", "admin", json={"persist_mode": "async"})
    assert server_says.status_code == 409 and "10052" in server_says.json()["detail"]  # the server's own code
    records = call(console, "GET", "/audit?limit=1000").json()["records"]
    edits = [(r["user"], r["outcome"]) for r in records if r["action"] == "stream.edit"]
    assert ("token:admin-bot", "accepted") in edits and ("token:viewer-bot", "refused: role") in edits
    assert ("token:admin-bot", "refused: server") in edits


def test_a_role_limited_to_team_streams_reads_and_changes_no_other(console):
    assert call(console, "PATCH", "/streams/TEAM_A", "team", json={"allow_batched": True}).status_code == 200
    assert call(console, "PATCH", "/streams/OTHER", "team", json={"allow_batched": False}).status_code == 403
    assert call(console, "GET", "/streams/OTHER", "team").status_code == 403
    assert {s["name"] for s in call(console, "GET", "/streams", "team").json()} == {"TEAM_A"}
    poll_until(lambda: call(console, "GET", "/losses").json()["total"] >= 1, 30, "the loss on Live")
    assert call(console, "GET", "/losses", "team").json()["total"] == 0  # API_LOSS is not the team's
    assert call(console, "GET", "/incidents/api-loss", "team").status_code == 404
    assert call(console, "GET", "/incidents/api-loss", "viewer").status_code == 200


def test_losses_incident_and_report_say_what_live_holds(console):
    poll_until(lambda: call(console, "GET", "/losses?stream=API_LOSS").json()["total"] == 1, 30, "the loss")
    [loss] = call(console, "GET", "/losses?stream=API_LOSS&kind=atomic").json()["items"]
    assert (loss["batch_id"], loss["reason"], loss["kind"]) == ("api-loss", "timeout", "atomic")
    incident = call(console, "GET", "/incidents/api-loss").json()
    assert incident["stream"] == "API_LOSS" and incident["reason"] == "timeout"
    report = call(console, "GET", "/incidents/api-loss/report")
    assert report.status_code == 200 and report.text.startswith("# Incident: batch api-loss")


@pytest.mark.parametrize("method, path, body, status", [
    ("GET", "/streams/" + "X" * 300, None, 422),
    ("GET", "/streams/A%00B", None, 422),
    ("GET", "/streams/A.B", None, 422),
    ("GET", "/incidents/" + "b" * 200, None, 422),
    ("GET", "/losses?limit=1000000000", None, 422),
    ("GET", "/losses?since=yesterday", None, 422),
    ("GET", "/losses?system=" + "s" * 100, None, 422),
    ("GET", "/losses?system=nope", None, 404),
    ("PATCH", "/streams/TEAM_A", {"allow_batched": "yes"}, 422),
    ("PATCH", "/streams/TEAM_A", {"allow_batched": True, "max_age": 1}, 422),
    ("PATCH", "/streams/TEAM_A", ["allow_batched"], 422),
    ("PATCH", "/streams/TEAM_A", {"persist_mode": "fast"}, 422),
    ("PATCH", "/streams/NO_SUCH", {"allow_batched": True}, 404),
])
def test_hostile_parameters_are_refused_as_problems_never_a_5xx(console, method, path, body, status):
    answer = call(console, method, path, json=body)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM)


def test_a_body_too_large_and_a_flood_of_calls_are_refused(console):
    big = httpx.patch(console.url + "/streams/TEAM_A", content=b"{" + b" " * 70_000 + b"}", timeout=30,
                      headers={"Authorization": f"Bearer {console.tokens['viewer']}", "Content-Type": "application/json"})
    assert big.status_code == 413
    with httpx.Client(headers={"Authorization": f"Bearer {console.tokens['viewer']}"}, timeout=30) as client:
        statuses = [client.get(console.url + "/systems").status_code for _ in range(200)]
    assert statuses[0] == 200 and 429 in statuses  # 40 at once, then 20 a second


async def _mcp(console: Console, who: str) -> dict:
    """The MCP server (`batch-console mcp`, stdio) driven by the MCP SDK's own client: its tools, and each
    called once, as the token of `who`."""
    import os

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(command=CLI, args=["mcp", "--api-url", console.url.removesuffix("/api/v1")],
                                   env={**os.environ, "BATCH_CONSOLE_API_TOKEN": console.tokens[who]})
    calls = {"losses": {"stream": "API_LOSS"}, "incident": {"batch_id": "api-loss"},
             "incident_report": {"batch_id": "api-loss"}, "checks": {}, "streams": {}, "systems": {}}
    with open(os.devnull, "w") as quiet:
        async with stdio_client(server, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            answers = {name: (await session.call_tool(name, args)).content[0].text for name, args in calls.items()}
    return {"tools": tools, **answers}


def test_the_mcp_server_answers_with_the_tokens_role_and_changes_nothing(console):
    def settings() -> list[tuple]:
        return [(s["name"], s["allow_atomic"], s["allow_batched"], s["persist_mode"])
                for s in call(console, "GET", "/streams").json()]

    before = settings()
    trail_before = len(call(console, "GET", "/audit?limit=1000").json()["records"])
    found = asyncio.run(_mcp(console, "viewer"))
    assert found["tools"] == {"losses", "incident", "incident_report", "checks", "streams", "systems"}
    assert '"batch_id":"api-loss"' in found["losses"] and found["incident_report"].startswith("# Incident: batch api-loss")
    assert '"TEAM_A"' in found["streams"] and '"OTHER"' in found["streams"]
    team = asyncio.run(_mcp(console, "team"))  # the token's role holds: no other team's stream or loss
    assert '"OTHER"' not in team["streams"] and team["incident"].startswith("refused (404")
    assert settings() == before  # no read-only tool changed anything
    assert len(call(console, "GET", "/audit?limit=1000").json()["records"]) == trail_before


@pytest.fixture
def api_schema(console):
    return schemathesis.openapi.from_url(console.url + "/openapi.json")


fuzzed = schemathesis.pytest.from_fixture("api_schema")


@fuzzed.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_calls_generated_from_the_openapi_document_find_no_5xx_and_no_answer_off_its_schema(case, console):
    """schemathesis, bounded: every operation with generated (and hostile) parameters, as an operator."""
    case.call_and_validate(base_url=console.url.removesuffix("/api/v1"),
                           headers={"Authorization": f"Bearer {console.tokens['fuzz']}"})


def test_a_search_job_runs_as_the_search_page_does_masked_and_its_tokens_alone(console):
    started = call(console, "POST", "/searches", "viewer", json={"stream": "TEAM_A", "where": "payload.n >= 1"})
    assert started.status_code == 202, started.text
    job = started.json()["id"]
    poll_until(lambda: call(console, "GET", f"/searches/{job}", "viewer").json()["state"] == "done", 30, "the search")
    done = call(console, "GET", f"/searches/{job}", "viewer").json()
    assert done["matched"] == 2 and [m["seq"] for m in done["matches"]] == [2, 3]
    assert SECRET not in str(done) and base64.b64encode(SECRET.encode()).decode()[:12] not in str(done)
    assert all(SECRET not in base64.b64decode(m["data_base64"]).decode() for m in done["matches"])  # masked
    assert call(console, "GET", f"/searches/{job}", "admin").status_code == 404  # another token's: none
    assert call(console, "DELETE", f"/searches/{job}", "viewer").status_code == 204
    assert call(console, "POST", "/searches", "team", json={"stream": "OTHER"}).status_code == 403
    refused = call(console, "POST", "/searches", "viewer", json={"stream": "TEAM_A", "where": "payload.("}).json()
    assert refused["state"] == "refused" and "where" in refused["detail"].lower() or "expression" in refused["detail"]
    records = call(console, "GET", "/audit?limit=1000").json()["records"]
    assert any(r["action"] == "search.run" and r["user"] == "token:viewer-bot" for r in records)


def test_conformance_and_history_answer_as_their_pages(console):
    assert call(console, "GET", "/conformance").status_code == 200
    history = call(console, "GET", "/history/abandoned_batches")
    assert history.status_code in (200, 404) and history.headers["content-type"].split(";")[0] in (
        "application/json", PROBLEM)
    assert call(console, "GET", "/history/not_a_table").status_code == 422
