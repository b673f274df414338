"""A real OpenID Connect provider for the tests (panva's oidc-provider, from npm, tests/peers/oidc): users
who sign in through the browser, and machines that take RFC 9068 access tokens by client credentials."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.processes import free_port
from tests.waits import poll_until

PEER = Path(__file__).resolve().parent / "peers" / "oidc"
CLIENT, SECRET = "batch-console", "the-console-s3cret-at-the-provider"
MACHINE_SECRET = "a-machine-s3cret-at-the-provider"


def start_provider(tmp: Path, name: str, redirect_uris: list[str], procs: list[subprocess.Popen],
                   users: dict[str, list[str]], machines: dict[str, list[str]] | None = None,
                   resources: dict[str, int] | None = None) -> str:
    """users: login -> groups (the sign-in's); machines: client id -> groups, each taking access tokens by the
    client credentials grant (its secret: MACHINE_SECRET) for a resource of `resources` (audience -> seconds)."""
    if not (PEER / "node_modules" / "oidc-provider").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PEER, check=True, capture_output=True, timeout=300)
    port = free_port()
    issuer = f"http://localhost:{port}"  # not 127.0.0.1: the console's cookies and the provider's stay apart
    config = {"port": port, "issuer": issuer, "users": {u: {"groups": g} for u, g in users.items()},
              "machines": [{"client_id": m, "client_secret": MACHINE_SECRET, "groups": g}
                           for m, g in (machines or {}).items()], "resources": resources or {},
              "clients": [{"client_id": CLIENT, "client_secret": SECRET, "redirect_uris": redirect_uris,
                           "post_logout_redirect_uris": [uri.replace("/login", "/logout") for uri in redirect_uris]}]}
    log = tmp / f"{name}.log"
    proc = subprocess.Popen(["node", str(PEER / "provider.mjs"), json.dumps(config)], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)
    procs.append(proc)  # stopped by the fixture however far its setup got
    poll_until(lambda: proc.poll() is None and "ready" in log.read_text() or (proc.poll() is not None and
                                                                              pytest.fail(log.read_text())),
               60, "the OpenID provider did not start")
    return issuer
