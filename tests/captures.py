"""The verbatim server replies in ../shared/protocol/captures, as test vectors."""

from __future__ import annotations

import json
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "protocol" / "captures"


def records(name: str | None = None) -> list[dict]:
    files = [CAPTURES / name] if name else sorted(CAPTURES.glob("*.jsonl"))
    if not files or not files[0].exists():
        raise FileNotFoundError(f"protocol captures not found at {CAPTURES}")
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def reply_bodies() -> list[tuple[str, str]]:
    """(label, body) for every batch reply the captures hold (advisories and API responses excluded)."""
    found = []
    for rec in records():
        label = rec.get("label", "")
        subject = rec.get("subject", "")
        if label == "stored":  # a stored message's payload, not a reply
            continue
        if "data" in rec and not subject.startswith("$JS.EVENT") and "stream_create_response" not in rec["data"]:
            found.append((label, rec["data"]))
        for item in rec.get("items", []) + rec.get("tap", []):
            found.append((label, item[1]))
        for key in ("sample_first", "sample_last", "publisher_got"):
            if key in rec:
                found.append((label, rec[key]))
        if isinstance(rec.get("puback"), str) and rec["puback"].startswith("{"):
            found.append((label, rec["puback"]))
    return found


def advisory_bodies() -> list[str]:
    return [r["data"] for r in records() if r.get("subject", "").startswith("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED")]


def fast_reply_subjects() -> list[str]:
    subjects = []
    for rec in records():
        for key in ("reply", "subject"):
            if str(rec.get(key, "")).endswith(".$FI"):
                subjects.append(rec[key])
        subjects += [item[0] for item in rec.get("items", []) if str(item[0]).endswith(".$FI")]
    return subjects
