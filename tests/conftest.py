"""Fixtures shared by every test folder: a real nats-server from the venv, on a free loopback port."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.cluster import EmbeddedCluster
from console.broker.server import BatchLimits, EmbeddedServer
from tests.server_versions import DEFAULT, VERSIONS
from tests.soak import SOAK  # noqa: F401 (loads the property tests' profile before any test module)

# Short enough to wait on in tests; the inflight cap makes 10210/10211 cheap to reach.
TEST_LIMITS = BatchLimits(timeout=1.0, max_msgs=100, max_inflight_per_stream=5)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory):
    with EmbeddedServer(tmp_path_factory.mktemp("nats"), batch_limits=TEST_LIMITS) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of the test module's own, where its streams and consumers meet no other module's."""
    with EmbeddedServer(tmp_path_factory.mktemp("module"), batch_limits=TEST_LIMITS) as s:
        yield s


# A leader election takes a second or two: batches must outlive it to show what it does to them.
CLUSTER_LIMITS = BatchLimits(timeout=5.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nats-server processes on loopback (n1..n3) with a JetStream meta leader; a test can step
    a stream's leader down, or kill and restart a node (cluster.kill(i), cluster.restart(i))."""
    with EmbeddedCluster(tmp_path_factory.mktemp("cluster"), 3, batch_limits=CLUSTER_LIMITS) as c:
        yield c


@pytest.fixture
async def nc(nats_server):
    conn = await nats.connect(nats_server.url, connect_timeout=5)
    yield conn
    await conn.close()


def pytest_itemcollected(item):
    """Under pytest-xdist (--dist loadgroup), the tests that share something costly run on one worker:
    every Spark test on one local session, every three-node cluster one at a time (two at once starve
    their elections on two cores), and each other file's tests together (its module's server). Given
    as each test is collected: pytest-xdist reads the groups in a collection hook of its own."""
    if item.get_closest_marker("xdist_group") is None:
        item.add_marker(pytest.mark.xdist_group(_group(item)))


def pytest_collection_modifyitems(items):
    """The order the parallel workers take the groups in: the longest first (every Spark test on one
    session, every cluster one at a time), then the browser groups spread among the others in proportion,
    so that three browsers and their consoles are not all drawing at once at the end while the cores idle
    at the start, when most tests wait on a server or a timer. (tests/ui/conftest.py stops Playwright at
    each module's end, so a worker can take an asyncio test after a browser one.)"""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(item.get_closest_marker("xdist_group").args[0], []).append(item)
    first = [name for name in LONGEST_GROUPS if name in groups]
    browser = [name for name in groups if name not in first and "/tests/ui/" in str(groups[name][0].path)]
    other = [name for name in groups if name not in first and name not in browser]
    place = {name: (i + 0.5) / len(names) for names in (browser, other) for i, name in enumerate(names)}
    items[:] = [item for name in first + sorted(place, key=place.__getitem__) for item in groups[name]]


LONGEST_GROUPS = ("spark", "cluster")


def _group(item) -> str:
    if "/tests/analytics/" in str(item.path):
        return "spark"
    if item.get_closest_marker("cluster") is not None or any("cluster" in f for f in item.fixturenames):
        return "cluster"
    return item.path.name


class Vectors:
    """One server release's verbatim replies in tests/vectors/<version>/ (scripts/capture_vectors.py writes them)."""

    ROOT = Path(__file__).parent / "vectors"

    def __init__(self, version: str = DEFAULT):
        self.version = version
        self.HOME = self.ROOT / version

    @property
    def fast_ingest(self) -> bool:
        """Whether this release has fast ingest (one without refuses a stream that allows it)."""
        return not any("refused" in r for r in self.records("streams"))

    def records(self, kind: str) -> list[dict]:
        path = self.HOME / f"{kind}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def scenario(self, kind: str, name: str) -> list[dict]:
        found = [r for r in self.records(kind) if r["scenario"] == name]
        if not found and kind == "fast" and not self.fast_ingest:
            pytest.skip(f"nats-server {self.version} has no fast ingest")
        assert found, f"no {kind} vectors for scenario {name!r} from nats-server {self.version}"
        return found

    def replies(self) -> list[tuple[str, str]]:
        """(scenario, body) of every batch reply; a no-responders status has no body to parse."""
        return [(r["scenario"], r["body"]) for kind in ("atomic", "fast") for r in self.records(kind) if "status" not in r]


@pytest.fixture(scope="session", params=VERSIONS)
def vectors(request) -> Vectors:
    """Each release's vectors in turn: a test of the parsers holds for every server an operator runs."""
    return Vectors(request.param)


_names = itertools.count()


@pytest.fixture
def make_stream(nc):
    """make_stream(allow_atomic=..., allow_batched=..., **config) -> (stream name, subject prefix)."""

    async def create(**config) -> tuple[str, str]:
        name = f"T{next(_names)}"
        subject = name.lower()
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{subject}.>"], **config))
        return name, subject

    return create
