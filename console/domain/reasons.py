"""Why a batch was lost: the one list of reasons every reader knows (Live, History, alerts, metrics).

The advisory's reasons first, then the fast-ingest ones, then those the server never advertises (a
leader change, a batch unknown to the leader, no stream answering, allow_atomic switched off, the
stream deleted). The list is open: a newer server's reason is recorded and shown as itself (bounded,
printable, escaped where it is drawn), and a rule's reason OTHER covers every reason not listed here.
"""

from __future__ import annotations

from typing import Iterable

from console.domain.wire import MalformedInput, bounded_text

ADVISORY_REASONS = ("timeout", "incomplete", "large", "unsupported")
REASONS = (*ADVISORY_REASONS, "gap", "error", "dropped", "leader_change", "unknown_batch", "no_responders", "disabled",
           "stream_deleted")
OTHER = "other"  # a rule's reason for every reason this console does not know
MAX_REASON = 64


def wire_reason(value: object, error: type[MalformedInput] = MalformedInput) -> str:
    """A reason as the wire gives it: known or not, 1..64 printable characters."""
    return bounded_text(value, "reason", MAX_REASON, error)


def is_known(reason: str | None) -> bool:
    return reason in REASONS


def in_order(reasons: Iterable[str]) -> list[str]:
    """The known reasons in the list's order, then any others alphabetically."""
    present = set(reasons)
    return [r for r in REASONS if r in present] + sorted(present - set(REASONS))
