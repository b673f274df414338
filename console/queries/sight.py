"""What one reader may see: the streams its roles act on (console.domain.roles.Grants.sees). A role
limited to TEAM_* streams is shown nothing of another stream on any face: not its name, settings,
losses, findings, history rows or audit records. Every face asks this one rule, here."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, TypeVar

import pandas as pd

from console.domain.audit import Checked
from console.domain.budgets import BudgetStatus, Objective
from console.domain.conformance import Verdicts
from console.domain.roles import Grants

T = TypeVar("T")


class Sight:
    def __init__(self, grants: Grants | Callable[[], Grants]):
        self._grants = grants  # a callable: the roles file as it is at each read

    @property
    def grants(self) -> Grants:
        return self._grants() if callable(self._grants) else self._grants

    def sees(self, stream: str | None) -> bool:
        return self.grants.sees(stream or None)

    @property
    def limit(self) -> Callable[[str | None], bool] | None:
        """The predicate a read filters by, or None when this reader sees every stream (nothing to filter)."""
        return None if self.grants.sees_every_stream else self.sees

    def through(self, shared: Any, view: Callable[[Any, Callable[[str | None], bool]], Any]) -> Any:
        """A shared reader (the admin, History, the alerts) as this reader sees it, `view(shared, sees)`; the
        shared one itself when it sees every stream (nothing to filter) or there is none."""
        sees = self.limit
        return shared if shared is None or sees is None else view(shared, sees)

    def sees_objective(self, objective: Objective) -> bool:
        """A loss objective is seen when every stream glob it names is (its counts sum those streams)."""
        return all(self.sees(glob) for glob in objective.streams)

    def statuses(self, found: list[BudgetStatus], objectives: Iterable[Objective]) -> list[BudgetStatus]:
        """The budget statuses of the objectives this reader sees."""
        mine = {o.name for o in objectives if self.sees_objective(o)}
        return [s for s in found if s.objective in mine]

    def keep(self, items: Iterable[T], stream: Callable[[T], str | None]) -> list[T]:
        """The items whose stream this reader sees."""
        grants = self.grants
        if grants.sees_every_stream:
            return list(items)
        return [item for item in items if grants.sees(stream(item) or None)]

    def rows(self, frame: pd.DataFrame, column: str = "stream") -> pd.DataFrame:
        """A frame's rows whose stream this reader sees (a frame without the column is about no stream)."""
        grants = self.grants
        if grants.sees_every_stream or column not in frame.columns or frame.empty:
            return frame
        shown = [grants.sees(s if isinstance(s, str) and s else None) for s in frame[column]]
        return frame[shown].reset_index(drop=True)

    def audit(self, checked: Checked) -> Checked:
        """The trail's records this reader sees (an action on a stream it does not see is absent); the
        chain's verdict is the whole trail's."""
        if self.grants.sees_every_stream:
            return checked
        kept = [i for i, (_, r) in enumerate(checked.records) if self.sees(r.stream)]
        systems = tuple(checked.systems[i] for i in kept) if checked.systems else ()
        return replace(checked, records=[checked.records[i] for i in kept], systems=systems)


    def verdicts(self, found: Verdicts) -> Verdicts:
        """The clients' verdicts, their example batches on streams this reader does not see left out."""
        return found if self.grants.sees_every_stream else found.withholding(self.sees)
