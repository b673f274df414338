"""A server stopping, as the system account hears it (`$SYS.SERVER.<id>.LAMEDUCK` as lame duck mode begins,
`.SHUTDOWN` as it shuts down; verified on nats-server 2.15.1, the body the server's own ServerInfo), and
the stops that happened outside a console maintenance and cost batches (the check BATCH_034). Only a
system account's client hears these subjects; the body is read totally all the same. A process killed
outright (SIGKILL, a lost machine) sends neither: it shows only in its streams' leader elections."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

from console.domain.advisories import parse_timestamp
from console.domain.events import LOST_KINDS, SYSTEM_ADVISORY, BatchEvent, EventKind, MalformedEvent
from console.domain.maintenance_record import maintenance_record
from console.domain.wire import MAX_LABEL, MalformedInput, bounded_text, bounded_time, load_object

SUBJECTS = ("$SYS.SERVER.*.LAMEDUCK", "$SYS.SERVER.*.SHUTDOWN")
HOW = {"LAMEDUCK": "lame_duck", "SHUTDOWN": "shutdown"}
_SUBJECT = re.compile(r"^\$SYS\.SERVER\.([A-Z0-9]{1,64})\.(LAMEDUCK|SHUTDOWN)$")
SETTLE = timedelta(seconds=10)  # past the batch timeout: the losses a stop causes are judged by then


def node_stopped(subject: str, data: bytes) -> BatchEvent:
    """The event of a server's lame duck or shutdown notice. Raises MalformedEvent for anything else."""
    found = _SUBJECT.match(subject)
    if found is None:
        raise MalformedEvent("not a server's stop notice subject")
    server_id, how = found.group(1), HOW[found.group(2)]
    body = load_object(data, MalformedEvent, max_bytes=16_384)
    if body.get("id") != server_id:
        raise MalformedEvent("a stop notice names another server than its subject")
    name = bounded_text(body.get("name"), "name", MAX_LABEL, MalformedEvent)
    try:
        when = bounded_time(parse_timestamp(bounded_text(body.get("time"), "time", 64, MalformedEvent)), MalformedEvent)
    except ValueError:  # MalformedEvent is one too
        raise MalformedEvent("a stop notice's time is an RFC 3339 time") from None
    return BatchEvent(f"node-stopped.{server_id}.{how}", EventKind.NODE_STOPPED, when, reason=how, detail=name,
                      source=SYSTEM_ADVISORY)


@dataclass(frozen=True)
class StopOutside:
    node: str
    how: str  # lame_duck | shutdown
    time: datetime
    lost: int  # batches lost from the stop to the batch timeout after it

    def evidence(self) -> str:
        said = "entered lame duck mode" if self.how == "lame_duck" else "shut down"
        return (f"{self.node} {said} at {self.time:%Y-%m-%d %H:%M:%S}Z outside a console maintenance: "
                f"{self.lost} batch(es) lost within the batch timeout after it")


def stops_outside(events: Iterable[BatchEvent], batch_timeout: float) -> tuple[StopOutside, ...]:
    """The window's server stops that no console restart covered and after which batches were lost (from
    the stop to the batch timeout and SETTLE after it); a node's lame duck and its shutdown are one stop.
    A stop that cost nothing is not one: stopping a quiet node is what maintenance is."""
    events = list(events)
    covered = []
    for e in events:
        if e.kind is EventKind.MAINTENANCE:
            try:
                record = maintenance_record(e)
            except MalformedInput:
                continue
            if record.action == "restart":
                covered.append(record)
    retracted = {e.batch_id for e in events if e.kind is EventKind.LOSS_RETRACTED and e.batch_id}
    losses = [e for e in events if e.kind in LOST_KINDS and e.batch_id not in retracted]
    stops: dict[str, BatchEvent] = {}  # by server id: the first notice (a lame duck before its shutdown)
    for e in events:
        if e.kind is EventKind.NODE_STOPPED and e.source == SYSTEM_ADVISORY and e.detail:
            stops.setdefault(e.event_id.split(".")[1], e)
    after = timedelta(seconds=batch_timeout) + SETTLE
    found = []
    for e in stops.values():
        node = e.detail or ""
        if any(node in m.nodes and m.covers(e.time) for m in covered):
            continue
        lost = len({(x.stream, x.batch_id) for x in losses if e.time - timedelta(seconds=2) <= x.time <= e.time + after})
        if lost:
            found.append(StopOutside(node, e.reason or "shutdown", e.time, lost))
    return tuple(sorted(found, key=lambda s: s.time))
