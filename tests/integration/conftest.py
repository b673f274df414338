"""Fixtures of the integration tests that more than one module uses."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

PEER = Path(__file__).resolve().parents[1] / "peers" / "natsjs"
JSEXTRA = Path(__file__).resolve().parents[1] / "peers" / "jsextra"


@pytest.fixture(scope="session")
def natsjs():
    """The nats.js peer, its packages installed from npm (package-lock.json) once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed (scripts/test.sh installs Debian's nodejs and npm)")
    if not all((PEER / "node_modules" / "@nats-io" / package).exists() for package in ("transport-node", "jetstream")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PEER, check=True, capture_output=True, timeout=300)
    return json.loads((PEER / "node_modules" / "@nats-io" / "nats-core" / "package.json").read_text())["version"]


def _python_313() -> str | None:
    """A CPython 3.13 that runs: pyenv's, else one on the PATH (pyenv's shim there runs only where 3.13 is set)."""
    for candidate in [*map(str, sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python"))), shutil.which("python3.13")]:
        if candidate and subprocess.run([candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 13)"],
                                        capture_output=True, timeout=30).returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="session")
def jsextra() -> Path:
    """The Python of nats-jetstream-extra's own venv (it needs Python 3.13; its pinned packages from the
    index), made once; skipped, and said, only where no Python 3.13 is found."""
    python = JSEXTRA / ".venv" / "bin" / "python"
    if not python.exists():
        base = _python_313()
        if base is None:
            pytest.skip("nats-jetstream-extra needs Python 3.13: none found (python3.13 on the PATH, or pyenv's)")
        subprocess.run([base, "-m", "venv", str(JSEXTRA / ".venv")], check=True, capture_output=True, timeout=120)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(JSEXTRA / "requirements.txt")],
                       check=True, capture_output=True, timeout=600)
    return python


@pytest.fixture(scope="module")
def accounts_cluster(tmp_path_factory):
    """Three nodes with the accounts of test_collector_sources (app, a limited user, the system account)."""
    from console.broker.cluster import EmbeddedCluster
    from tests.conftest import CLUSTER_LIMITS
    from tests.integration.test_collector_sources import ACCOUNTS

    with EmbeddedCluster(tmp_path_factory.mktemp("cluster-accounts"), 3, batch_limits=CLUSTER_LIMITS,
                         extra_config=ACCOUNTS) as cluster:
        yield cluster
