"""Fixtures of the integration tests that more than one module uses."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

PEER = Path(__file__).resolve().parents[1] / "peers" / "natsjs"


@pytest.fixture(scope="session")
def natsjs():
    """The nats.js peer, its packages installed from npm (package-lock.json) once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed (scripts/test.sh installs Debian's nodejs and npm)")
    if not all((PEER / "node_modules" / "@nats-io" / package).exists() for package in ("transport-node", "jetstream")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PEER, check=True, capture_output=True, timeout=300)
    return json.loads((PEER / "node_modules" / "@nats-io" / "nats-core" / "package.json").read_text())["version"]
