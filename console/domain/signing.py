"""The event log's authentication: an HMAC-SHA256 of each event's body with the console's key,
in a header, so the body stays the event's JSON. Any client of the account can publish on the
log's subjects; readers drop what the collector did not sign."""

from __future__ import annotations

import hashlib
import hmac
from typing import Mapping

SIGNATURE = "Batch-Console-Signature"
SYSTEM = "Batch-Console-System"  # the system (of a systems file) a record was signed for, inside what is signed
MAX_SYSTEM = 64


def signature(key: bytes, body: bytes, system: str | None = None) -> str:
    """The body's HMAC; with `system`, the system's name is signed with it (and sent in the SYSTEM header)."""
    signed = body if system is None else body + b"\x00system:" + system.encode()
    return hmac.new(key, signed, hashlib.sha256).hexdigest()


def forgery(key: bytes, body: bytes, headers: Mapping[str, str] | None, system: str | None = None) -> str | None:
    """Why this record is not the collector's (for counting), or None when its signature holds. `system`: the
    system whose log is read (a systems file's): a record signed for another one is not its, whatever its
    signature; one signed for none (a collector without a systems file, or before records named their
    system) is taken on its signature alone. Without `system`, any system's record whose signature holds."""
    found = headers or {}
    given = found.get(SIGNATURE)
    if not given:
        return "forged: unsigned"
    signed_for = found.get(SYSTEM)
    if signed_for is not None and not 0 < len(signed_for) <= MAX_SYSTEM:
        return "forged: a system name that is none"
    if not hmac.compare_digest(given, signature(key, body, signed_for)):  # constant time: no oracle for a forger
        return "forged: bad signature"
    if system is not None and signed_for is not None and signed_for != system:
        return "forged: signed for another system"
    return None
