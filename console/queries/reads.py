"""One reader's reads, every stream its roles do not see left out: the checks' findings, the loss budgets
and the losses that spent them, the audit trail, the publishers' verdicts, History's tables and one lost
batch's incident. Pages, the API and notebooks read here, so the rule (console.queries.sight) is applied
once, in one place. `SystemReads` reads one system; `FleetReads` every system merged (console.queries.fleet),
each part named with its system."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from console.domain.audit import Checked
from console.domain.conformance import Verdicts
from console.domain.wire import EARLIEST
from console.queries import fleet as read_fleet
from console.queries.sight import Sight

if TYPE_CHECKING:
    from console.domain.budgets import BudgetStatus, Objective
    from console.domain.incident import Incident
    from console.domain.manifests import Manifest
    from console.fleet import Fleet
    from console.runtime import Runtime

Findings = tuple[list[dict[str, Any]], datetime | None, list[tuple[str, str]]]


class Reads:
    """What a reader reads of some source (one system, or the fleet), as its sight allows."""

    def __init__(self, sight: Sight):
        self.sight = sight

    def findings(self) -> Findings:
        """The findings as the alerts part last evaluated them, those of streams the reader sees."""
        found, when, skipped = self._findings()
        return self.sight.keep(found, lambda f: f.get("stream")), when, skipped

    async def audit(self, since: datetime | None) -> Checked:
        """The trail from `since` (its beginning by default; a time to come reads nothing, not a wait for
        it), the records of streams the reader does not see absent (the chain's verdict is the whole trail's)."""
        if since is not None and since > datetime.now(timezone.utc):
            return Checked([], [])
        if since is not None and since < EARLIEST:  # the server's start time cannot go before it (a read hung)
            since = None
        return self.sight.audit(await self._audit(since))

    def recent_audit(self, since: datetime | None) -> tuple[datetime, Checked] | None:
        found = self._recent_audit(since)
        return None if found is None else (found[0], self.sight.audit(found[1]))

    async def verdicts(self) -> Verdicts:
        """The publishers' verdicts, their example batches on streams the reader does not see left out."""
        return self.sight.verdicts(await self._verdicts())

    def recent_verdicts(self) -> Verdicts | None:
        found = self._recent_verdicts()
        return None if found is None else self.sight.verdicts(found)

    def history(self) -> Any:
        """History's tables (a storage.history reader) of the streams the reader sees, or None."""
        return self.sight.through(self._history(), lambda shared, sees: shared.seen_by(sees))

    def _findings(self) -> Findings:
        raise NotImplementedError

    async def _audit(self, since: datetime | None) -> Checked:
        raise NotImplementedError

    def _recent_audit(self, since: datetime | None) -> tuple[datetime, Checked] | None:
        raise NotImplementedError

    async def _verdicts(self) -> Verdicts:
        raise NotImplementedError

    def _recent_verdicts(self) -> Verdicts | None:
        raise NotImplementedError

    def _history(self) -> Any:
        raise NotImplementedError


class SystemReads(Reads):
    def __init__(self, runtime: Runtime, sight: Sight):
        super().__init__(sight)
        self.runtime = runtime

    def _findings(self) -> Findings:
        return self.runtime.alerts.findings()

    async def _audit(self, since: datetime | None) -> Checked:
        return await self.runtime.audit.read(since)

    def _recent_audit(self, since: datetime | None) -> tuple[datetime, Checked] | None:
        return self.runtime.audit.recent(since)

    async def _verdicts(self) -> Verdicts:
        return await self.runtime.verdicts()

    def _recent_verdicts(self) -> Verdicts | None:
        return self.runtime.verdicts.recent()

    def _history(self) -> Any:
        return self.runtime.history

    def budgets(self) -> list[BudgetStatus] | None:
        """The statuses of the objectives whose streams the reader sees (None: no objectives or history)."""
        from console.storage.budgets import budgets_now

        found = budgets_now(self.runtime.objectives, self.runtime.history)
        return None if found is None else self.sight.statuses(found, self.runtime.objectives)

    def objective(self, name: str) -> Objective | None:
        return next((o for o in self.runtime.objectives if o.name == name and self.sight.sees_objective(o)), None)

    def spenders(self, name: str, limit: int = 500) -> list[dict[str, Any]] | None:
        """The losses that spent the objective's budget, newest first (None: no such objective it sees, or no
        history yet)."""
        from console.storage.budgets import losses_in

        objective, history = self.objective(name), self.runtime.history
        if objective is None or history is None:
            return None
        now = datetime.now(timezone.utc)
        spent = [r for r in losses_in(history.engine, now - objective.window, now)  # the batches it covers lost,
                 if objective.covers(r["stream"], r["publisher"].split(", ")[0] or None)]  # and fast ones' gaps
        return self.sight.keep(spent, lambda r: r["stream"])[:limit]

    async def manifests(self, since: datetime, stream: str | None = None) -> list[Manifest]:
        """The loss manifests since a time (of one stream, when given) of the streams the reader sees."""
        from console.manifests import read_manifests

        found = await read_manifests(self.runtime.live.log, since)
        return [m for m in found if self.sight.sees(m.stream) and (stream is None or m.stream == stream)]

    async def incident(self, batch_id: str, *args: Any, **kwargs: Any) -> Incident | None:
        """One lost batch's incident; another team's is as if there were none."""
        from console.queries.incidents import find_incident

        live = self.runtime.live
        found = await find_incident(live.log, batch_id, *args, model=live.model, history=self.runtime.history, **kwargs)
        return found if found is None or self.sight.sees(found.loss.stream) else None


class FleetReads(Reads):
    def __init__(self, fleet: Fleet, sight: Sight):
        super().__init__(sight)
        self.fleet = fleet

    def _findings(self) -> Findings:
        return read_fleet.findings(self.fleet.runtimes(), self.fleet.unreached)

    async def _audit(self, since: datetime | None) -> Checked:
        return await read_fleet.audit_trail(self.fleet.runtimes(), since)

    def _recent_audit(self, since: datetime | None) -> tuple[datetime, Checked] | None:
        return read_fleet.recent_audit(self.fleet.runtimes(), since)

    async def _verdicts(self) -> Verdicts:
        return await read_fleet.verdicts(self.fleet.runtimes())

    def _recent_verdicts(self) -> Verdicts | None:
        return read_fleet.recent_verdicts(self.fleet.runtimes())

    def _history(self) -> Any:
        return read_fleet.history(self.fleet.runtimes())[0]
