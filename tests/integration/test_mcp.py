"""The MCP server driven by the MCP SDK's own client against a real console: `batch-console mcp` (stdio)
and `serve --mcp` (streamable HTTP at /mcp). Its tools are listed and each called; the token's role
holds (a team token sees no other team's stream, loss or search); the read tools change nothing and
the writing ones exist only when turned on, then each is an audited action refused to a role without
it; a refused token is audited; `--api-url` is read strictly and a redirect is never followed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from console.config import WebSettings, env_name
from tests.api_console import SECRET, Console, call, running_console
from tests.waits import poll_until
from tests.processes import CLI

READS = {"losses", "incident", "incident_report", "checks", "streams", "systems", "conformance", "history", "search",
         "budgets", "canary", "maintenance_plan", "maintenance_job", "consumers_lag", "loss_manifests"}
WRITES = {"edit_stream", "mute_rule", "unmute_rule", "drain_node_job", "restart_node_job"}
CALLS = {"losses": {"stream": "API_LOSS"}, "incident": {"batch_id": "api-loss"},
         "incident_report": {"batch_id": "api-loss"}, "checks": {}, "streams": {}, "systems": {}, "conformance": {},
         "history": {"table": "abandoned_batches"}, "search": {"stream": "TEAM_A", "where": "payload.n >= 1"},
         "budgets": {}, "canary": {}, "maintenance_plan": {"node": "nowhere", "watch": 0}, "consumers_lag": {},
         "loss_manifests": {"stream": "API_LOSS"}}


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with running_console(tmp_path_factory.mktemp("mcp"), "--mcp", env={env_name(WebSettings, "refusals_every"): "2"}) \
            as found:
        yield found


async def _session(session, calls: dict) -> dict:
    await session.initialize()
    tools = {t.name for t in (await session.list_tools()).tools}
    return {"tools": tools, **{name: (await session.call_tool(name, args)).content[0].text
                               for name, args in calls.items()}}


async def over_stdio(console: Console, who: str, calls: dict = CALLS, *flags: str, url: str | None = None) -> dict:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(command=CLI, args=["mcp", "--api-url", url or console.url.removesuffix("/api/v1"),
                                                      *flags],
                                   env={**os.environ, "BATCH_CONSOLE_API_TOKEN": console.tokens.get(who, who)})
    with open(os.devnull, "w") as quiet:
        async with stdio_client(server, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            return await _session(session, calls)


async def over_http(console: Console, who: str, calls: dict = CALLS) -> dict:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    url = console.url.removesuffix("/api/v1") + "/mcp"
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {console.tokens.get(who, who)}"}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        return await _session(session, calls)


def _settings(console: Console) -> list[tuple]:
    """The operator's streams' settings (the console's own trail is made by the first action it records)."""
    return [(s["name"], s["allow_atomic"], s["allow_batched"], s["persist_mode"])
            for s in call(console, "GET", "/streams").json() if not s["name"].startswith("BATCH_CONSOLE_")]


@pytest.mark.parametrize("way", [over_stdio, over_http])
def test_every_read_tool_answers_as_the_tokens_role_and_changes_nothing(console, way):
    before = _settings(console)
    found = asyncio.run(way(console, "viewer"))
    assert found["tools"] == READS  # nothing that writes unless the operator turned it on
    assert '"batch_id":"api-loss"' in found["losses"] and found["incident_report"].startswith("# Incident: batch api-loss")
    assert '"TEAM_A"' in found["streams"] and '"OTHER"' in found["streams"]
    assert json.loads(found["consumers_lag"])["consumers"] == []  # the seeded streams have none
    [manifest] = json.loads(found["loss_manifests"])["manifests"]
    assert (manifest["batch"], manifest["missing"]) == ("api-loss", [[1, None]])
    assert json.loads(found["conformance"]) == [] and json.loads(found["history"]) == []  # no analytics run here
    search = json.loads(found["search"])
    assert search["state"] == "done" and search["matched"] == 2 and SECRET not in found["search"]
    assert search["untrusted"].startswith("the matches' subjects") and all("headers" not in m for m in search["matches"])
    team = asyncio.run(way(console, "team", {"streams": {}, "incident": {"batch_id": "api-loss"},
                                            "search": {"stream": "OTHER"}, "losses": {}}))
    assert '"OTHER"' not in team["streams"] and team["incident"].startswith("refused (404")
    assert team["search"].startswith("refused (403") and '"total":0' in team["losses"]
    assert found["maintenance_plan"].startswith("refused (403")  # a viewer may not drain: no node's plan
    admin = asyncio.run(way(console, "admin", {"maintenance_plan": {"node": "nowhere", "watch": 0}}))
    assert json.loads(admin["maintenance_plan"])["verdict"] == "refused"
    assert _settings(console) == before
    actions = {r["action"] for r in call(console, "GET", "/audit?limit=1000").json()["records"]
               if r["user"] in ("token:viewer-bot", "token:team-bot")}
    assert actions <= {"search.run", "stream.read", "maintain.plan"}  # the search an action, the plan's refusal


def test_the_writing_tools_only_when_turned_on_each_an_audited_action(console):
    change = {"edit_stream": {"name": "TEAM_A", "allow_batched": False}}
    viewer = asyncio.run(over_stdio(console, "viewer", change, "--writes"))
    assert viewer["tools"] == READS | WRITES and viewer["edit_stream"].startswith("refused (403")
    admin = asyncio.run(over_stdio(console, "admin", change, "--writes"))
    assert json.loads(admin["edit_stream"])["allow_batched"] is False
    team = asyncio.run(over_stdio(console, "team", {"edit_stream": {"name": "OTHER", "allow_batched": False}},
                                  "--writes"))
    assert team["edit_stream"].startswith("refused (403")
    edits = [(r["user"], r["outcome"]) for r in call(console, "GET", "/audit?limit=1000").json()["records"]
             if r["action"] in ("stream.edit", "stream.read")]
    assert ("token:admin-bot", "accepted") in edits and ("token:viewer-bot", "refused: role") in edits
    assert ("token:team-bot", "refused: role") in edits
    assert call(console, "PATCH", "/streams/TEAM_A", json={"allow_batched": True}).status_code == 200


def test_a_drain_from_mcp_is_the_apis_job_and_a_viewers_is_refused(console):
    drain = {"drain_node_job": {"node": "batch-console"}}
    viewer = asyncio.run(over_stdio(console, "viewer", drain, "--writes"))
    assert viewer["drain_node_job"].startswith("refused (403")
    admin = asyncio.run(over_stdio(console, "admin", drain, "--writes"))
    job = json.loads(admin["drain_node_job"])
    assert job["action"] == "maintain.drain" and job["node"] == "batch-console"
    poll_until(lambda: call(console, "GET", f"/maintenance/jobs/{job['id']}").json()["state"] == "done", 60, "drained")
    read = asyncio.run(over_stdio(console, "admin", {"maintenance_job": {"job_id": job["id"]}}))
    assert json.loads(read["maintenance_job"])["state"] == "done"


def test_a_refused_token_on_mcp_over_http_is_401_and_audited(console):
    import httpx

    url = console.url.removesuffix("/api/v1") + "/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for header in ({}, {"Authorization": "Bearer bct_" + "A" * 43}, {"Authorization": f"Bearer {console.tokens['revoked']}"}):
        answer = httpx.post(url, json=body, headers={**header, "Accept": "application/json, text/event-stream"},
                            timeout=30)
        assert answer.status_code == 401, answer.text

    def refused() -> set[str]:  # written at once, or counted in a summary of the window
        records = [r for r in call(console, "GET", "/audit?limit=1000").json()["records"]
                   if r["outcome"] == "refused: unauthenticated"]
        return {r["user"] for r in records if r["action"] == "mcp"} | {
            who for r in records if r["action"] == "refusals" and "mcp" in json.loads(r["detail"])["by_action"]
            for who in json.loads(r["detail"])["by_who"]}

    poll_until(lambda: {"mcp (no token)", "api (unknown token)", "token:gone"} <= refused(), 30, "each refusal audited")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "javascript:alert(1)", "http://user:pw@127.0.0.1:1",
                                 "http://127.0.0.1:1/\x1b[2J", "http://" + "a" * 3000, "http://127.0.0.1:99999",
                                 "http://127.0.0.1:1/?token=x", "127.0.0.1:8050", ""])
def test_a_hostile_api_url_is_refused_at_start_and_the_token_never_shown(url):
    done = subprocess.run([CLI, "mcp", "--api-url", url], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "BATCH_CONSOLE_API_TOKEN": "bct_secret-never-shown"}, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "--api-url" in done.stderr and "Traceback" not in done.stderr
    assert "bct_secret-never-shown" not in done.stdout + done.stderr


class _Recorder(BaseHTTPRequestHandler):
    heard: list[str] = []
    to: str = ""
    document: bytes = b""  # the API document it gives (asked without a token), if any

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.document and self.path == "/api/v1/openapi.json":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(self.document)
        elif self.to:
            self.send_response(307)
            self.send_header("Location", self.to + self.path)
            self.end_headers()
        else:
            type(self).heard.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else(console):
    """A console that gives its API document, then redirects every call elsewhere; and one that redirects
    the document too: `mcp` stops at its start, saying so."""
    document = call(console, "GET", "/openapi.json").content
    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), type("Elsewhere", (_Recorder,), {"heard": [], "to": ""}))
    redirecting = ThreadingHTTPServer(("127.0.0.1", 0), type("Redirecting", (_Recorder,), {
        "heard": [], "to": f"http://127.0.0.1:{elsewhere.server_port}", "document": document}))
    for server in (elsewhere, redirecting):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        found = asyncio.run(over_stdio(console, "viewer", {"losses": {}, "systems": {}},
                                       url=f"http://127.0.0.1:{redirecting.server_port}"))
        assert found["losses"].startswith("refused (307)") and found["systems"].startswith("refused (307)")
        assert elsewhere.RequestHandlerClass.heard == []  # type: ignore[attr-defined]  # the class made above
        redirecting.RequestHandlerClass.document = b""  # type: ignore[attr-defined]
        done = subprocess.run([CLI, "mcp", "--api-url", f"http://127.0.0.1:{redirecting.server_port}"],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                              env={**os.environ, "BATCH_CONSOLE_API_TOKEN": "bct_secret-never-shown"})
        assert done.returncode != 0 and "gave no API document (307" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "bct_secret-never-shown" not in done.stdout + done.stderr
        assert elsewhere.RequestHandlerClass.heard == []  # type: ignore[attr-defined]
    finally:
        for server in (elsewhere, redirecting):
            server.shutdown()
