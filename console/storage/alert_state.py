"""The alerts process's state in the console's SQLite database: what fires (a restart does not fire
again), what was sent and every delivery attempt (bounded), and a refused rules file. The process
writes; the Alerts page and Live read."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, delete, select

from console.storage.sqlite import open_db
from console.storage.tables import AlertDelivery, AlertFiring, AlertNotice, AlertProblem, CheckFinding, CheckRun

KEPT = 200  # notices and delivery attempts kept


class AlertStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.engine = open_db(self.path)

    # -- the alerts process ---------------------------------------------------------------

    def save_firing(self, firing: dict[tuple[str, str], tuple[datetime, datetime]]) -> None:
        """Replace what fires: {(rule, stream): (since, last sent)}."""
        with Session(self.engine) as s:
            s.exec(delete(AlertFiring))
            s.add_all(AlertFiring(rule=rule, stream=stream, since=since, last_sent=sent)
                      for (rule, stream), (since, sent) in firing.items())
            s.commit()

    def add_notice(self, time: datetime, body: str) -> None:
        self._add_bounded(AlertNotice(time=time, body=body), AlertNotice)

    def add_delivery(self, time: datetime, **attempt: Any) -> None:
        self._add_bounded(AlertDelivery(time=time, **attempt), AlertDelivery)

    def set_problem(self, text: str | None) -> None:
        with Session(self.engine) as s:
            s.exec(delete(AlertProblem))
            if text is not None:
                s.add(AlertProblem(text=text))
            s.commit()

    def save_findings(self, found: list[dict[str, Any]], unchecked: list[tuple[str, str]], now: datetime) -> None:
        """Replace the findings ({code, stream, severity, title, evidence, remedy}, one per code and
        stream) keeping when each was first seen, and the run's time and what it could not check."""
        with Session(self.engine) as s:
            first = {(f.code, f.stream): f.first_seen for f in s.exec(select(CheckFinding))}
            s.exec(delete(CheckFinding))
            s.add_all(CheckFinding(**f, first_seen=first.get((f["code"], f["stream"]), now), last_seen=now)
                      for f in found)
            s.merge(CheckRun(id=1, time=now, unchecked=json.dumps(unchecked)))
            s.commit()

    def _add_bounded(self, row: Any, table: Any) -> None:
        with Session(self.engine) as s:
            s.add(row)
            s.flush()
            s.exec(delete(table).where(table.id <= row.id - KEPT))
            s.commit()

    # -- what it kept -----------------------------------------------------------------------

    def firing(self) -> dict[tuple[str, str], tuple[datetime, datetime]]:
        with Session(self.engine) as s:
            return {(f.rule, f.stream): (f.since, f.last_sent) for f in s.exec(select(AlertFiring))}

    def notices(self) -> list[tuple[datetime, str]]:
        """Newest first: (time, the notice's JSON)."""
        with Session(self.engine) as s:
            return [(n.time, n.body) for n in s.exec(select(AlertNotice).order_by(col(AlertNotice.id).desc()))]

    def deliveries(self) -> list[dict[str, Any]]:
        """Newest first: time, rule, stream, status, target, ok, answer."""
        with Session(self.engine) as s:
            rows = s.exec(select(AlertDelivery).order_by(col(AlertDelivery.id).desc()))
            return [row.model_dump(exclude={"id"}) for row in rows]

    def findings(self) -> tuple[list[dict[str, Any]], datetime | None, list[tuple[str, str]]]:
        """The findings now, the last run's time (None: never run) and what it could not check."""
        with Session(self.engine) as s:
            found = [row.model_dump() for row in s.exec(select(CheckFinding))]
            run = s.get(CheckRun, 1)
            return found, run.time if run else None, [tuple(u) for u in json.loads(run.unchecked)] if run else []

    def problem(self) -> str | None:
        with Session(self.engine) as s:
            row = s.get(AlertProblem, 1)
            return row.text if row else None

