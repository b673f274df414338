"""What every reproduction here shares: a throwaway nats-server (or cluster) of one release on
loopback with its own store, and one way to end: print what ADR-50 says and what the server sent,
exit 0 when the divergence is reproduced, 1 when the server did what the ADR says, 2 when the
release cannot run the case at all (it lacks the feature)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.server_versions: the releases' binaries

from console.broker.cluster import EmbeddedCluster  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from tests.server_versions import binary  # noqa: E402

REPRODUCED, AS_THE_ADR_SAYS, NOT_APPLICABLE = 0, 1, 2


def version(doc: str, default: str) -> str:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("version", nargs="?", default=default, help=f"a nats-server release (default {default})")
    return parser.parse_args().version


@contextlib.contextmanager
def server(release: str) -> Iterator[EmbeddedServer]:
    with tempfile.TemporaryDirectory(prefix="repro-") as store, EmbeddedServer(store, binary=binary(release)) as s:
        yield s


@contextlib.contextmanager
def cluster(release: str) -> Iterator[EmbeddedCluster]:
    with tempfile.TemporaryDirectory(prefix="repro-") as store, \
            EmbeddedCluster(store, 3, binary=binary(release)) as c:
        yield c


def verdict(release: str, adr: str, seen: str, reproduced: bool) -> int:
    print(f"ADR-50:             {adr}")
    print(f"nats-server {release}: {seen}")
    print("REPRODUCED" if reproduced else "as the ADR says")
    return REPRODUCED if reproduced else AS_THE_ADR_SAYS


def not_applicable(release: str, why: str) -> int:
    print(f"nats-server {release}: cannot run this case: {why}")
    return NOT_APPLICABLE
