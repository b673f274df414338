"""The event log's authentication: an HMAC-SHA256 of each event's body with the console's key,
in a header, so the body stays the event's JSON. Any client of the account can publish on the
log's subjects; readers drop what the collector did not sign."""

from __future__ import annotations

import hashlib
import hmac
from typing import Mapping

SIGNATURE = "Batch-Console-Signature"


def signature(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def forgery(key: bytes, body: bytes, headers: Mapping[str, str] | None) -> str | None:
    """Why this record is not the collector's (for counting), or None when its signature holds."""
    given = (headers or {}).get(SIGNATURE)
    if not given:
        return "forged: unsigned"
    if not hmac.compare_digest(given, signature(key, body)):  # constant time: no oracle for a forger
        return "forged: bad signature"
    return None
