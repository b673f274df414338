"""The audit trail as a table: its records newest first, as a page, an export or the API shows them (the
filters applied, an action's attempt folded into its outcome). Pages and the API read it here alike."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pandas as pd

from console.domain.audit import AuditRecord, Checked, Outcome

# Who did what to which stream and how it ended first, in view at 1280 px; the long texts (a search's filters in
# its detail, the change) after them, the address last (action and stream were cut, outcome past a detail's JSON)
COLUMNS = ["record", "time", "user", "action", "stream", "outcome", "target", "detail", "change", "address", "agent"]
ANY = "(any)"


def audit_frame(checked: Checked, clock: Any, user: str = ANY, action: str = ANY, stream: str = "",
                until: datetime | None = None) -> pd.DataFrame:
    """Newest first, as the filters leave them (the records as they were written: a download's rows). An
    action's attempt (written ahead) is folded into its outcome; one with no outcome says so."""
    rows = []
    systems = checked.systems or ("",) * len(checked.records)
    for seq, r, system in reversed(_folded([(seq, r, s) for (seq, r), s in zip(checked.records, systems)])):
        if (user != ANY and r.actor.user != user) or (action != ANY and r.action != action) or \
                (stream and r.stream != stream) or (until is not None and r.time >= until):
            continue
        rows.append({"record": seq, "system": system, "time": clock.when(r.time), "user": r.actor.user,
                     "address": r.actor.address, "action": r.action, "stream": r.stream, "target": r.target,
                     "outcome": r.outcome, "detail": r.detail,
                     "change": "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in r.diff.items()), "agent": r.actor.agent})
    return pd.DataFrame(rows, columns=columns(bool(checked.systems)), dtype=object)


def columns(by_system: bool) -> list[str]:
    """The table's columns; several systems' trails: each record's system beside its number."""
    return [COLUMNS[0], "system", *COLUMNS[1:]] if by_system else COLUMNS



def _folded(records: list[tuple[int, AuditRecord, str]]) -> list[tuple[int, AuditRecord, str]]:
    out: list[tuple[int, AuditRecord, str] | None] = []
    waiting: dict[tuple[str, str, str, str], list[int]] = {}  # (system, user, action, target) -> attempts' places
    for seq, r, system in records:
        key = (system, r.actor.user, r.action, r.target)
        if r.outcome == Outcome.ATTEMPTED:
            waiting.setdefault(key, []).append(len(out))
            out.append((seq, replace(r, outcome=Outcome.NO_OUTCOME_YET), system))
            continue
        if waiting.get(key):
            out[waiting[key].pop(0)] = None
        out.append((seq, r, system))
    return [item for item in out if item is not None]
