"""The committed vectors still describe the server: recapture them and compare the replies' shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from console.domain.advisories import to_batch_abandoned
from console.domain.replies import ApiError, FlowAck, FlowError, FlowGap, PubAck, Staged, to_reply

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "capture_vectors.py"


def shape(record: dict) -> str:
    """What a reply is, without the ids, sequences and timestamps that change from run to run."""
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
    for kind in ("atomic", "fast", "advisories"):
        for line in (folder / f"{kind}.jsonl").read_text().splitlines():
            record = json.loads(line)
            found[(kind, record["scenario"])].append(shape(record))
    for key in found:
        if key[0] == "advisories":  # the two accounts' copies arrive in either order
            found[key].sort()
    return dict(found)


def test_a_fresh_capture_answers_every_scenario_as_the_committed_vectors_say(tmp_path, vectors):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    fresh, committed = shapes(tmp_path), shapes(vectors.HOME)
    assert fresh.keys() == committed.keys()
    differ = {key: (committed[key], fresh[key]) for key in committed if committed[key] != fresh[key]}
    assert differ == {}
