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


@pytest.fixture(scope="module")
def accounts_cluster(tmp_path_factory):
    """Three nodes with the accounts of test_collector_sources (app, a limited user, the system account)."""
    from console.broker.cluster import EmbeddedCluster
    from tests.conftest import CLUSTER_LIMITS
    from tests.integration.test_collector_sources import ACCOUNTS

    with EmbeddedCluster(tmp_path_factory.mktemp("cluster-accounts"), 3, batch_limits=CLUSTER_LIMITS,
                         extra_config=ACCOUNTS) as cluster:
        yield cluster
