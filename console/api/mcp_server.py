"""`batch-console mcp`: an MCP server (stdio) for assistants, whose tools are calls of a running console's
/api/v1 with one token: the token's role and the console's masking hold for every answer, and each call is
the API's (limited, audited as the API's). Every tool reads; none changes anything."""

from __future__ import annotations

from typing import Any

import httpx

from console.errors import ConfigError

MAX_ANSWER = 200_000  # characters of an answer handed to the assistant


class ConsoleApi:
    """A console's API, called with one token."""

    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.url = url.rstrip("/") + "/api/v1"
        self.headers = {"Authorization": f"Bearer {token}", "User-Agent": "batch-console mcp"}
        self.timeout = timeout

    async def get(self, path: str, **params: Any) -> str:
        """The answer's text (JSON, or Markdown for a report); a refusal's problem detail as text."""
        query = {k: v for k, v in params.items() if v is not None}
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            answer = await client.get(self.url + path, params=query, headers=self.headers)
        if answer.status_code >= 400:
            try:
                problem = answer.json()
                return f"refused ({answer.status_code} {problem.get('title', '')}): {problem.get('detail', '')}"
            except ValueError:
                return f"refused ({answer.status_code})"
        return answer.text[:MAX_ANSWER]


def server(api: ConsoleApi):
    """The MCP server and its read-only tools."""
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer("jetstream-batch-console", instructions=(
        "Read what a NATS JetStream batch console recorded: batches lost (atomic abandonments, fast-ingest "
        "gaps), one lost batch's incident and report, the health checks' findings, the audit trail. Nothing "
        "here changes anything."))

    @mcp.tool()
    async def losses(stream: str | None = None, reason: str | None = None, kind: str | None = None,
                     since: str | None = None, system: str | None = None, limit: int = 50) -> str:
        """Lost batches of the last hour, newest first (JSON): stream, batch id, reason, kind, publisher."""
        return await api.get("/losses", stream=stream, reason=reason, kind=kind, since=since, system=system,
                             limit=max(1, min(limit, 1000)))

    @mcp.tool()
    async def incident(batch_id: str, system: str | None = None) -> str:
        """One lost batch's incident (JSON): the loss, the batch's own events, what happened around it."""
        return await api.get(f"/incidents/{_segment(batch_id)}", system=system)

    @mcp.tool()
    async def incident_report(batch_id: str, system: str | None = None) -> str:
        """One lost batch's incident as a Markdown report, as the console's Incident page downloads it."""
        return await api.get(f"/incidents/{_segment(batch_id)}/report", system=system)

    @mcp.tool()
    async def checks(system: str | None = None) -> str:
        """The batch health checks' findings (JSON), each with its evidence and remedy."""
        return await api.get("/checks", system=system)

    @mcp.tool()
    async def streams(system: str | None = None) -> str:
        """Every stream's batch settings (JSON): allow_atomic, allow_batched, persist_mode, replicas."""
        return await api.get("/streams", system=system)

    @mcp.tool()
    async def systems() -> str:
        """The NATS systems this console watches, and whether each is reachable (JSON)."""
        return await api.get("/systems")

    return mcp


def _segment(text: str) -> str:
    """A path segment: the API refuses a bad batch id; nothing here may reach another path."""
    return httpx.URL("/" + text.replace("/", "%2F")).raw_path.decode()[1:]


def run(url: str, token: str) -> None:
    if not token:
        raise ConfigError("mcp: give the API token in BATCH_CONSOLE_API_TOKEN (batch-console token create)")
    server(ConsoleApi(url, token)).run("stdio")

