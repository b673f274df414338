"""The committed vectors still describe each server release: recapture them from each one and compare the
replies' shapes, so a new patch release that changes its answers is noticed before it misleads the parsers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from console.domain.advisories import to_batch_abandoned
from console.domain.replies import ApiError, FlowAck, FlowError, FlowGap, PubAck, Staged, to_reply
from tests.server_versions import VERSIONS, binary

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "capture_vectors.py"


def shape(record: dict) -> str:
    """What a reply is, without the ids, sequences and timestamps that change from run to run."""
    if "flags" in record:  # a stream: refused, or the API level its flags require
        refused = record.get("refused")
        return f"refused {refused['err_code']}" if refused else f"level {record['metadata']['_nats.req.level']}"
    if "status" in record:
        return f"status {record['status']}"
    if "account" in record:
        return f"{record['account']} {to_batch_abandoned(record['body']).reason.value}"
    reply = to_reply(record["body"])
    if isinstance(reply, ApiError):
        return f"error {reply.err_code}"
    if isinstance(reply, FlowError):
        return f"err {reply.error.err_code}"
    if isinstance(reply, PubAck):
        return "puback duplicate" if reply.duplicate else "puback"
    names = {Staged: "staged", FlowAck: "ack", FlowGap: "gap"}
    return names[type(reply)]


def shapes(folder: Path) -> dict[tuple[str, str], list[str]]:
    found = defaultdict(list)
    for kind in ("atomic", "fast", "advisories", "streams"):
        for line in (folder / f"{kind}.jsonl").read_text().splitlines():
            record = json.loads(line)
            found[(kind, record["scenario"])].append(shape(record))
    for key in found:
        if key[0] == "advisories":  # the two accounts' copies arrive in either order
            found[key].sort()
    return dict(found)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_fresh_capture_answers_every_scenario_as_the_committed_vectors_say(tmp_path, version):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--binary", str(binary(version))],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "manifest.json").read_text())["server"] == version
    fresh, committed = shapes(tmp_path), shapes(Path(__file__).resolve().parents[1] / "vectors" / version)
    assert fresh.keys() == committed.keys()
    differ = {key: (committed[key], fresh[key]) for key in committed if committed[key] != fresh[key]}
    assert differ == {}
