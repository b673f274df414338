"""Canary batches: an atomic and a fast-ingest batch sent on a schedule through each node (a canary stream
led by it), timed to the first ack and to the commit, and their losses counted. A result is an event
like any other (CANARY, its JSON in `detail`), read back totally: the event log is anyone's to write."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from console.domain.events import COLLECTOR, BatchEvent, EventKind, MalformedEvent
from console.domain.systems import domain_name
from console.domain.wire import MAX_LABEL, MAX_TEXT, bounded_int, bounded_text, load_object

KINDS = ("atomic", "fast")
PREFIX = "BATCH_CONSOLE_CANARY_"
SUBJECT = "_batch_console.canary"
MARK = "batch_console.canary"  # the metadata key of a stream the canary made: the only streams it writes to
MAX_MS = 3_600_000
_NODE = re.compile(r"[^A-Za-z0-9_-]")
FIELDS = {"system", "node", "kind", "first_ack_ms", "commit_ms", "lost", "sent", "error", "led_elsewhere"}


def ms_text(value: float | None, missing: str = "") -> str:
    """A time in milliseconds as the CLI and the page show it; `missing` for one not measured."""
    return missing if value is None else f"{value:,.1f}"


def stream_for(node: str) -> str:
    """The canary stream that a node leads: its name made of the node's, safe for a stream name."""
    return PREFIX + (_NODE.sub("_", node)[:64] or "NODE").upper()


def subject_for(node: str, domain: str | None = None) -> str:
    """The node's canary subject; in a JetStream domain (a leaf's) its own tree, which no stream of another
    domain's canary takes (a node of one domain may bear the name of another domain)."""
    tail = _NODE.sub('_', node)[:64] or 'node'
    return f"{SUBJECT}.{tail}" if domain is None else f"{SUBJECT}_domain.{domain}.{tail}"


@dataclass(frozen=True)
class CanaryResult:
    system: str
    node: str  # the server's name (the stream's leader when the batch was sent)
    kind: str  # atomic | fast
    first_ack_ms: float | None  # None: no ack came
    commit_ms: float | None  # None: not committed
    lost: int  # messages of the batch not stored
    sent: int
    error: str | None = None
    led_elsewhere: bool = False  # the stream's leader was not the node (it was moved back after)
    tampered: str | None = None  # what someone else changed of the canary's stream: then nothing of the node is told
    domain: str | None = None  # the JetStream domain (a leaf's) the node serves, when not the system's own

    @property
    def failed(self) -> bool:
        """Not committed, or messages of it not stored, through a stream as the canary made it."""
        return self.tampered is None and (self.commit_ms is None or self.lost > 0)

    def to_json(self) -> dict[str, object]:
        return {"system": self.system, "node": self.node, "kind": self.kind, "first_ack_ms": self.first_ack_ms,
                "commit_ms": self.commit_ms, "lost": self.lost, "sent": self.sent, "error": self.error,
                "led_elsewhere": self.led_elsewhere, "tampered": self.tampered, "domain": self.domain}

    def event(self, instance: str, time: datetime, stream: str) -> BatchEvent:
        return BatchEvent(f"canary.{instance}.{time.timestamp():.3f}.{self.kind}.{self.node}"[:200], EventKind.CANARY,
                          time, stream, detail=json.dumps(self.to_json(), separators=(",", ":")), source=COLLECTOR,
                          domain=self.domain)


def canary_result(event: BatchEvent) -> CanaryResult:
    """A CANARY event's result. Raises MalformedEvent for anything else."""
    found = load_object(event.detail or "", MalformedEvent)
    if set(found) - {"tampered", "domain"} != FIELDS:  # newer: a result written before them has neither
        raise MalformedEvent("a canary result has other fields")
    if found["kind"] not in KINDS or type(found["led_elsewhere"]) is not bool:
        raise MalformedEvent("a canary result's kind is atomic or fast")
    return CanaryResult(bounded_text(found["system"], "system", MAX_LABEL, MalformedEvent),
                        bounded_text(found["node"], "node", MAX_LABEL, MalformedEvent), found["kind"],
                        _ms(found["first_ack_ms"]), _ms(found["commit_ms"]),
                        bounded_int(found["lost"], "lost", 0, 1_000_000, MalformedEvent),
                        bounded_int(found["sent"], "sent", 0, 1_000_000, MalformedEvent),
                        None if found["error"] is None else bounded_text(found["error"], "error", MAX_TEXT,
                                                                         MalformedEvent),
                        found["led_elsewhere"],
                        None if found.get("tampered") is None else bounded_text(found["tampered"], "tampered", MAX_TEXT,
                                                                                MalformedEvent),
                        None if found.get("domain") is None else _domain(found["domain"]))


def _domain(value: object) -> str:
    try:
        return domain_name(value)
    except ValueError as e:
        raise MalformedEvent(f"a canary's domain: {str(e)[:80]}") from None


def _ms(value: object) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 <= value <= MAX_MS:  # type: ignore[operator]  # checked just before
        raise MalformedEvent("a canary's time is milliseconds from 0 to an hour")
    return float(value)  # type: ignore[arg-type]  # an int or a float, checked above


@dataclass(frozen=True)
class NodeHealth:
    """What the checks say of one node's canaries in a window."""

    system: str
    node: str
    results: int
    failed: int  # not committed, or lost messages
    slowest_commit_ms: float | None
    led_elsewhere: int = 0  # batches sent while the node could not take its canary stream's leadership back
    tampered: tuple[str, ...] = ()  # what someone else changed of its canary stream, as each result said

    def tampering(self) -> str | None:
        """Evidence that someone other than the canary changed or deleted the node's canary stream, or None."""
        if not self.tampered:
            return None
        return (f"node {self.node}: its canary stream was changed by someone else for {len(self.tampered)} of "
                f"{self.results} canary batches ({self.tampered[-1]}): they say nothing of the node")

    def finding(self, slow_ms: float) -> tuple[str, str] | None:
        """(severity, evidence) when the node's canaries fail, are slow, or the node cannot lead its canary
        stream (a stopped or cut-off node loses its leaderships); None when they are well."""
        if self.failed:
            return "critical", f"node {self.node}: {self.failed} of {self.results} canary batches failed or lost messages"
        if self.led_elsewhere:
            return "warning", (f"node {self.node}: could not lead its canary stream for {self.led_elsewhere} of "
                               f"{self.results} canary batches (another node took its leadership and kept it)")
        if self.slowest_commit_ms is not None and self.slowest_commit_ms > slow_ms:
            return "warning", (f"node {self.node}: a canary batch took {self.slowest_commit_ms:,.0f} ms to commit "
                               f"(slow past {slow_ms:,.0f} ms)")
        return None


def node_health(results: list[CanaryResult]) -> list[NodeHealth]:
    by_node: dict[tuple[str, str], list[CanaryResult]] = {}
    for r in results:
        by_node.setdefault((r.system, r.node), []).append(r)
    return [NodeHealth(system, node, len(rs), sum(1 for r in rs if r.failed),
                       max((r.commit_ms for r in rs if r.commit_ms is not None and r.tampered is None), default=None),
                       sum(1 for r in rs if r.led_elsewhere and r.tampered is None),
                       tuple(r.tampered for r in rs if r.tampered is not None))
            for (system, node), rs in sorted(by_node.items())]
