"""The canary batches' results as the Canary page and the API read them from the event log, and one round
run from the page."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable

from console.broker.connection import Connection
from console.config import EventLogSettings
from console.domain.canary import CanaryResult, canary_result
from console.domain.wire import MalformedInput

if TYPE_CHECKING:
    from console.actions import Actions
    from console.canary import CanaryRun

WINDOW = 60.0  # minutes of results the page shows


async def recent_canaries(connection: Callable[[], Connection], event_log: Callable[[], EventLogSettings],
                          window_minutes: float = WINDOW) -> list[tuple[datetime, CanaryResult]]:
    """(when, result) of every canary batch in the window, oldest first; one that does not read is left out."""
    from console.broker.eventlog import EventLog
    from console.domain.events import EventKind

    end = datetime.now(timezone.utc)
    found = []
    for _, event in await EventLog.over(connection(), event_log()).window(
            end - timedelta(minutes=window_minutes), end, kind_filter=f"{EventKind.CANARY.value}.>", idle_timeout=1.0):
        try:
            found.append((event.time, canary_result(event)))
        except MalformedInput:
            continue
    return found


async def canary_round(nc: Connection, event_log: EventLogSettings, fleet_name: str, actions: Actions) -> CanaryRun:
    """One canary round through every node, as the action canary.run of whoever `actions` acts for; its
    results go to the event log (a missing event key is said before the action)."""
    from console.broker.eventlog import EventLog
    from console.canary import CanaryOptions
    from console.commands import RunCanary

    return await actions.run(RunCanary(CanaryOptions(fleet_name, once=True), EventLog.over(nc, event_log)))
