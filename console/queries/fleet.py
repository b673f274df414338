"""Reads of several systems at once, merged: each system's part named with its system, one that cannot be
read said, never a failure of the others. The pages of all systems and the API read the fleet here; what
a reader may see of the merge is the sight's (console/queries/sight.py), applied after."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any, Mapping, TYPE_CHECKING

from console.domain.audit import Checked
from console.domain.conformance import Verdicts

if TYPE_CHECKING:
    from console.domain.live_model import LostBatch
    from console.runtime import Runtime
    from console.storage.history import ReaderAcross

Runtimes = Mapping[str, "Runtime"]


def findings(runtimes: Runtimes, unreached: Mapping[str, str]
             ) -> tuple[list[dict[str, Any]], datetime | None, list[tuple[str, str]]]:
    """Every system's findings as its alerts part last evaluated them, each with its system; the oldest
    evaluation; the checks not made (and the systems not reached)."""
    found: list[dict[str, Any]] = []
    times: list[datetime] = []
    unchecked: list[tuple[str, str]] = []
    for name, runtime in runtimes.items():
        each, when, skipped = runtime.alerts.findings()
        found += [{**f, "system": name} for f in each]
        times += [when] if when is not None else []
        unchecked += [(f"{name} {code}", why) for code, why in skipped]
    unchecked += [(name, f"not reachable ({why})") for name, why in unreached.items()]
    return found, min(times, default=None), unchecked


async def audit_trail(runtimes: Runtimes, since: datetime | None) -> Checked:
    """Every system's audit trail, each record with its system and each chain checked on its own; a trail
    that cannot be read is a break (nothing of it is vouched for)."""
    read = await asyncio.gather(*(r.audit.read(since) for r in runtimes.values()), return_exceptions=True)
    merged = Checked.across({name: c for name, c in zip(runtimes, read) if isinstance(c, Checked)})
    unread = [(0, f"system {name}: not read: {str(e)[:200] or type(e).__name__}")
              for name, e in zip(runtimes, read) if not isinstance(e, Checked)]
    return replace(merged, breaks=[*merged.breaks, *unread]) if unread else merged


def recent_audit(runtimes: Runtimes, since: datetime | None) -> tuple[datetime, Checked] | None:
    """The trails' records held in memory since `since`, merged (None: none held yet)."""
    found = {name: seen for name, r in runtimes.items() if (seen := r.audit.recent(since)) is not None}
    if not found:
        return None
    return min(at for at, _ in found.values()), Checked.across({name: c for name, (_, c) in found.items()})


async def verdicts(runtimes: Runtimes) -> Verdicts:
    """Every system's clients, each named with its system; a system whose log cannot be read is left out."""
    read = await asyncio.gather(*(r.verdicts() for r in runtimes.values()), return_exceptions=True)
    return Verdicts.across({name: v for name, v in zip(runtimes, read) if isinstance(v, Verdicts)})


def recent_verdicts(runtimes: Runtimes) -> Verdicts | None:
    found = {name: v for name, r in runtimes.items() if (v := r.verdicts.recent()) is not None}
    return Verdicts.across(found) if found else None


def history(runtimes: Runtimes) -> tuple[ReaderAcross | None, str | None]:
    """One reader of every system's history tables (each row with its system), and why a system has none."""
    from console.storage.history import ReaderAcross

    readers = {name: r.history for name, r in runtimes.items() if r.history is not None}
    problems = "; ".join(f"{name}: {r.history_problem}" for name, r in runtimes.items() if r.history is None)
    return (ReaderAcross(readers) if readers else None), problems or None


def losses(runtimes: Runtimes, limit: int = 10_000, per_stream: int = 50) -> list[LostBatch]:
    """Every system's lost batches as Live holds them (the last hour), newest first within each system."""
    return [b for runtime in runtimes.values() for b in runtime.live.model.newest_first(limit=limit, per_stream=per_stream)]
