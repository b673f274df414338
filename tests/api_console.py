"""A real console for the API's and MCP's tests: a nats-server, a collector, `serve` with a roles file
(a team role limited to TEAM_*) and masking of TEAM_* payloads, tokens of each role (one revoked, one
expired), and a stream whose atomic batch was abandoned."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon
from tests.processes import CLI, free_port, wait_http
from tests.waits import collector_ready

ROLES = """
[[role]]
name = "team"
actions = ["stream.edit"]
streams = ["TEAM_*"]

[[group]]
name = "console-admins"
roles = ["admin"]

[[group]]
name = "console-viewers"
roles = ["viewer"]

[[group]]
name = "team-a"
roles = ["team"]
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
    web_pid: int = 0


def token(data: Path, roles: Path, *args: str) -> str:
    done = subprocess.run([CLI, "token", *args, "--data-dir", str(data), "--roles", str(roles)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


async def seed(url: str, collector) -> None:
    nc = await nats.connect(url)
    await collector_ready(nc.jetstream(), collector)
    for name in ("TEAM_A", "OTHER"):
        await nc.jetstream().add_stream(name=name, subjects=[name.lower()], allow_atomic=True, allow_batched=True)
    for i in range(3):
        await nc.jetstream().publish("team_a", f'{{"n": {i}, "card": {{"number": "{SECRET}"}}}}'.encode())
    await abandon(nc, "API_LOSS", "api-loss")
    await nc.close()


@contextlib.contextmanager
def running_console(tmp: Path, *serve_args: str, alerts: bool = False, env: dict[str, str] | None = None):
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
                                   "--roles", str(roles), "--mask-rules", str(mask), *serve_args],
                                  stdout=open(tmp / "web.log", "w"), stderr=subprocess.STDOUT,
                                  env={**os.environ, **(env or {})})]
        if alerts:
            procs.append(subprocess.Popen([CLI, "alerts", "--server", server.url, "--data-dir", str(data),
                                           "--metrics-port", "0", "--check-every", "1"],
                                          stdout=open(tmp / "alerts.log", "w"),
                                          stderr=subprocess.STDOUT))
        try:
            wait_http(f"http://127.0.0.1:{port}/api/v1/openapi.json", procs[1], tmp / "web.log")
            asyncio.run(seed(server.url, procs[0]))
            yield Console(f"http://127.0.0.1:{port}/api/v1", server.url, tokens, data, procs[1].pid)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=20)


def call(console: Console, method: str, path: str, who: str | None = "admin", **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {console.tokens[who]}"} if who in console.tokens else \
        {"Authorization": who} if who else {}
    return httpx.request(method, console.url + path, headers=headers, timeout=30, **kw)


