"""Each loss budget as it stands now: the objectives, and the counts the analytics job wrote to SQLite,
summed over each objective's windows at the moment asked (a window slides without a run of the job)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine

from console.domain.budgets import WINDOWS, BudgetStatus, Objective, budget_statuses
from console.storage.budgets import count_rows


def budgets_now(objectives: list[Objective], engine: Engine, now: datetime | None = None) -> list[BudgetStatus]:
    now = now or datetime.now(timezone.utc)
    longest = max([o.window for o in objectives] + list(WINDOWS.values()))
    return budget_statuses(objectives, count_rows(engine, now - longest, now), now)


def spenders(objective: Objective, engine: Engine, now: datetime | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """The losses that spent the objective's budget over its window, newest first: the batches it covers
    that were lost, and the fast batches that lost messages in gaps."""
    from console.storage.budgets import losses_in

    now = now or datetime.now(timezone.utc)
    mine = [r for r in losses_in(engine, now - objective.window, now)
            if objective.covers(r["stream"], r["publisher"].split(", ")[0] or None)]
    return mine[:limit]
