"""A maintenance in the event log: one MAINTENANCE event as it begins and one as it ends (its window, the
nodes, who, what the ledger said), so History keeps maintenances beside losses and Live marks a loss
that happened inside one. The event log is anyone's to write: a record is read back totally, and a
mark it makes is a label on a loss, never a reason to hide one."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from console.domain.events import COLLECTOR, BatchEvent, EventKind, MalformedEvent
from console.domain.wire import MAX_LABEL, MAX_TEXT, bounded_int, bounded_text, load_object

ACTIONS = ("drain", "restart")
PHASES = ("begun", "ended")
MAX_NODES = 64
# A maintenance whose end never came (the console killed midway, or a forged beginning) marks losses
# for this long after its start, no longer.
OPEN_AT_MOST = timedelta(hours=1)
FIELDS = {"id", "phase", "start", "until", "nodes", "actor", "lost", "unexpected", "outcome"}
MAX_STEPS = 100  # steps an ended record lists (each leadership moved with its pause, each node restarted)


@dataclass(frozen=True)
class MaintenanceRecord:
    id: str
    action: str  # drain | restart
    nodes: tuple[str, ...]
    actor: str
    start: datetime
    end: datetime | None = None  # None: begun, not (yet) ended
    until: datetime | None = None  # the ledger's window end: the end and a batch timeout after it
    lost: int | None = None  # batches lost on the streams touched, from the ledger (None: it cannot tell)
    unexpected: int | None = None  # of those, the ones not named before a step
    outcome: str = ""
    steps: tuple[str, ...] = ()  # each step in a line: a leadership moved with its pause, a node restarted

    @classmethod
    def begin(cls, action: str, nodes: list[str], actor: str) -> MaintenanceRecord:
        return cls(secrets.token_hex(8), action, tuple(nodes), actor, datetime.now(timezone.utc))

    def ended(self, until: datetime | None, lost: int | None, unexpected: int | None, outcome: str,
              end: datetime | None = None, steps: tuple[str, ...] = ()) -> MaintenanceRecord:
        """Its end (default now: when the steps were done, before the ledger was read)."""
        end = end or datetime.now(timezone.utc)
        return MaintenanceRecord(self.id, self.action, self.nodes, self.actor, self.start, end, until or end, lost,
                                 unexpected, outcome[:MAX_TEXT], tuple(s[:MAX_LABEL] for s in steps[:MAX_STEPS]))

    @property
    def phase(self) -> str:
        return "begun" if self.end is None else "ended"

    def covers(self, when: datetime) -> bool:
        """Whether a loss at `when` happened inside the maintenance's window."""
        last = self.until or self.end or self.start + OPEN_AT_MOST
        return self.start <= when <= last

    def label(self) -> str:
        what = f"{self.action} of {', '.join(self.nodes)} by {self.actor}"
        return what if len(what) <= MAX_LABEL else what[:MAX_LABEL - 1] + "…"

    def event(self) -> BatchEvent:
        detail = {"id": self.id, "phase": self.phase, "start": self.start.isoformat(),
                  "until": self.until.isoformat() if self.until else None, "nodes": list(self.nodes),
                  "actor": self.actor, "lost": self.lost, "unexpected": self.unexpected, "outcome": self.outcome,
                  "steps": list(self.steps)}
        return BatchEvent(f"maintenance.{self.id}.{self.phase}", EventKind.MAINTENANCE, self.end or self.start,
                          reason=self.action, detail=json.dumps(detail, separators=(",", ":")), source=COLLECTOR)


def maintenance_record(event: BatchEvent) -> MaintenanceRecord:
    """A MAINTENANCE event's record. Raises MalformedEvent for anything else."""
    if event.kind is not EventKind.MAINTENANCE or event.reason not in ACTIONS:
        raise MalformedEvent("not a maintenance record")
    found = load_object(event.detail or "", MalformedEvent)
    if set(found) - {"steps"} != FIELDS or found["phase"] not in PHASES:  # "steps" is new: older records lack it
        raise MalformedEvent("a maintenance record has other fields")
    if not isinstance(found["id"], str) or not 1 <= len(found["id"]) <= 32 or not found["id"].isalnum():
        raise MalformedEvent("a maintenance record's id")
    steps = found.get("steps", [])
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise MalformedEvent("a maintenance record's steps are a list of at most 100")
    nodes = found["nodes"]
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_NODES:
        raise MalformedEvent("a maintenance record names 1 to 64 nodes")
    start = _time(found["start"])
    ended = found["phase"] == "ended"
    until = _time(found["until"]) if ended else None
    if (not start <= event.time <= (until or event.time)) if ended else abs(event.time - start) > timedelta(seconds=1):
        raise MalformedEvent("a maintenance record's times are out of order")
    return MaintenanceRecord(found["id"], event.reason or "", tuple(bounded_text(n, "node", MAX_LABEL, MalformedEvent)
                                                                    for n in nodes),
                             bounded_text(found["actor"], "actor", MAX_LABEL, MalformedEvent), start,
                             event.time if ended else None, until, _count(found["lost"], "lost"),
                             _count(found["unexpected"], "unexpected"),
                             "" if found["outcome"] == "" else bounded_text(found["outcome"], "outcome", MAX_TEXT,
                                                                           MalformedEvent),
                             tuple(bounded_text(step, "step", MAX_LABEL, MalformedEvent) for step in steps))


def _count(value: object, key: str) -> int | None:
    return None if value is None else bounded_int(value, key, 0, 1_000_000, MalformedEvent)


def _time(value: object) -> datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise MalformedEvent("a maintenance record's time is an ISO 8601 text")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedEvent("a maintenance record's time is an ISO 8601 text") from None
    if when.tzinfo is None:
        raise MalformedEvent("a maintenance record's time has no time zone")
    return when.astimezone(timezone.utc)
