"""A client's conformance verdict as the collector writes it to the event log, read back by the page,
the CLI and the checks (hostile input, so parsed totally). The statements themselves, each with the
ADR's words and its grading hooks, are console/domain/statements/; the grading, grader.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable, Mapping

from console.domain.publisher import Publisher, publisher_from_dict
from console.domain.statements import STATEMENTS
from console.domain.statements.base import ON_PUBLISH_SIDE, ON_REPLIES
from console.domain.wire import MAX_LABEL, MalformedInput, bounded_int, bounded_text, load_object

if TYPE_CHECKING:
    from console.domain.events import BatchEvent

PASS, FAIL, NOT_OBSERVED, CANNOT_TELL = "pass", "fail", "not observed", "cannot tell without the publish side"
UNCONFIRMED = "unconfirmed: rests on replies alone"  # any client of the account may publish on an inbox
MAX_EXAMPLES = 3  # failing batches kept per statement per client (a verdict stays within one event)
MAX_DETAIL = 300
MAX_COUNT = 2**53


class MalformedVerdict(MalformedInput):
    what = "conformance verdict"


@dataclass(frozen=True)
class Example:
    """A batch that shows a failure: its id, stream (when known), when, and what was seen."""

    batch_id: str
    stream: str | None
    time: str
    detail: str
    rests_on: str | None = None  # what shows it: ON_PUBLISH_SIDE, or ON_REPLIES (then it is unconfirmed)

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("batch", self.batch_id), ("stream", self.stream), ("time", self.time),
                                  ("detail", self.detail), ("rests_on", self.rests_on)) if v is not None}


@dataclass
class Tallies:
    passed: int = 0
    failed: int = 0  # failures the publish side shows
    examples: list[Example] = field(default_factory=list)
    unconfirmed: int = 0  # failures only the server's replies show: a client of the account may have forged them


@dataclass(frozen=True)
class ClientVerdict:
    """One client's results over the batches the collector graded: per statement, batches that
    passed and failed, and up to MAX_EXAMPLES failing ones."""

    key: str  # what the client is known by: account, name, language, version
    publisher: Publisher | None
    batches: int
    publish_side: bool  # some of its batches were seen on the publish side
    results: Mapping[str, Tallies]
    since: str
    until: str
    system: str = ""  # of several NATS systems' verdicts read as one (Verdicts.across), the client's

    def status(self, statement_id: str) -> str:
        tallies = self.results.get(statement_id)
        if tallies is not None and tallies.failed:
            return FAIL
        if tallies is not None and tallies.unconfirmed:
            return UNCONFIRMED
        if tallies is not None and tallies.passed:
            return PASS
        if STATEMENTS[statement_id].needs_publish_side and not self.publish_side:
            return CANNOT_TELL
        return NOT_OBSERVED

    @property
    def failing(self) -> list[str]:
        return [s for s in STATEMENTS if self.status(s) == FAIL]

    def verdict(self) -> str:
        """What every face says of it: "conforms" only when no statement is one the console cannot tell without
        the publish side (a demo of deliberate faults, each in what cannot be told, was called conforming)."""
        if self.failing:
            return "does not conform"
        if self.unconfirmed:
            return "unconfirmed failures"
        untold = sum(1 for sid in STATEMENTS if self.status(sid) == CANNOT_TELL)
        return f"no failure seen; {untold} cannot be told" if untold else "conforms"

    @property
    def unconfirmed(self) -> list[str]:
        """Statements only replies on its inbox say it fails: not a verdict against it, said as such."""
        return [s for s in STATEMENTS if self.status(s) == UNCONFIRMED]

    @property
    def name(self) -> str:
        said = self.publisher.line() if self.publisher else "(publisher unknown)"
        return f"[{self.system}] {said}" if self.system else said

    def to_json(self) -> str:
        return json.dumps({
            "key": self.key, "publisher": self.publisher.to_dict() if self.publisher else None,
            "batches": self.batches, "publish_side": self.publish_side, "since": self.since, "until": self.until,
            "results": {sid: {"passed": t.passed, "failed": t.failed, "examples": [e.to_dict() for e in t.examples],
                              **({"unconfirmed": t.unconfirmed} if t.unconfirmed else {})}
                        for sid, t in self.results.items() if t.passed or t.failed or t.unconfirmed},
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> ClientVerdict:
        """Total: MalformedVerdict for anything that is not a verdict the collector writes."""
        obj = load_object(text, MalformedVerdict, 256 * 1024)
        results_obj = obj.get("results")
        if not isinstance(results_obj, dict) or len(results_obj) > len(STATEMENTS):
            raise MalformedVerdict("'results' is not an object of statements")
        results = {}
        for sid, raw in results_obj.items():
            if sid not in STATEMENTS or not isinstance(raw, dict):
                raise MalformedVerdict(f"not a statement: {str(sid)[:20]!r}")
            examples = raw.get("examples") or []
            if not isinstance(examples, list) or len(examples) > MAX_EXAMPLES:
                raise MalformedVerdict("'examples' is not a short list")
            results[sid] = Tallies(bounded_int(raw.get("passed"), "passed", 0, MAX_COUNT, MalformedVerdict),
                                   bounded_int(raw.get("failed"), "failed", 0, MAX_COUNT, MalformedVerdict),
                                   [_example(e) for e in examples],
                                   bounded_int(raw.get("unconfirmed", 0), "unconfirmed", 0, MAX_COUNT, MalformedVerdict))
        publisher = obj.get("publisher")
        if type(obj.get("publish_side")) is not bool:
            raise MalformedVerdict("'publish_side' is not a boolean")
        return cls(bounded_text(obj.get("key"), "key", 4 * MAX_LABEL, MalformedVerdict),
                   None if publisher is None else publisher_from_dict(publisher, MalformedVerdict),
                   bounded_int(obj.get("batches"), "batches", 0, MAX_COUNT, MalformedVerdict), obj["publish_side"],
                   results, _time(obj.get("since")), _time(obj.get("until")))


def _time(value: object) -> str:
    text = bounded_text(value, "time", 40, MalformedVerdict)
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedVerdict(f"not a time: {text[:40]!r}") from None
    return text


def _example(raw: object) -> Example:
    if not isinstance(raw, dict):
        raise MalformedVerdict("an example is not an object")
    stream, rests_on = raw.get("stream"), raw.get("rests_on")
    if rests_on not in (None, ON_PUBLISH_SIDE, ON_REPLIES):
        raise MalformedVerdict("'rests_on' is not what a verdict rests on")
    return Example(bounded_text(raw.get("batch"), "batch", 128, MalformedVerdict),
                   None if stream is None else bounded_text(stream, "stream", MAX_LABEL, MalformedVerdict),
                   _time(raw.get("time")), bounded_text(raw.get("detail"), "detail", MAX_DETAIL, MalformedVerdict),
                   rests_on)


def client_key(publisher: Publisher | None) -> str:
    """A client as the report groups it: every connection of one application and library version."""
    if publisher is None:
        return "(publisher unknown)"
    return " | ".join(p or "-" for p in (publisher.account, publisher.name, publisher.lang, publisher.version))


MAX_VERDICTS = 10_000


class Verdicts:
    """The latest verdict of each client, from the collector's conformance events (bounded: the client
    heard from longest ago goes first). A verdict that is not one is counted in `malformed`, skipped."""

    def __init__(self, max_clients: int = MAX_VERDICTS):
        self.max_clients = max_clients
        self._latest: OrderedDict[str, tuple[datetime, ClientVerdict]] = OrderedDict()
        self.malformed = 0

    def apply(self, event: BatchEvent) -> None:
        try:
            verdict = ClientVerdict.from_json(event.detail or "")
        except MalformedVerdict:
            self.malformed += 1
            return
        known = self._latest.get(verdict.key)
        if known is not None and known[0] > event.time:
            return  # an older verdict stored late never overrides a newer one
        self._latest.pop(verdict.key, None)
        self._latest[verdict.key] = (event.time, verdict)
        while len(self._latest) > self.max_clients:
            self._latest.popitem(last=False)

    @classmethod
    def across(cls, systems: Mapping[str, Verdicts]) -> Verdicts:
        """Several NATS systems' verdicts as one: each client with its system (in its name and its key)."""
        merged = cls(max_clients=sum(v.max_clients for v in systems.values()) or MAX_VERDICTS)
        for system, verdicts in systems.items():
            merged.malformed += verdicts.malformed
            for time, verdict in verdicts._latest.values():
                key = f"{system}/{verdict.key}"
                merged._latest[key] = (time, replace(verdict, key=key, system=system))
        return merged

    def withholding(self, sees: Callable[[str | None], bool]) -> Verdicts:
        """These verdicts as a reader limited to some streams has them: a client's verdict is the client's
        (its counts span streams and name none), its example batches on streams the reader does not see
        are left out."""
        kept = Verdicts(self.max_clients)
        kept.malformed = self.malformed
        for key, (time, verdict) in self._latest.items():
            results = {sid: replace(t, examples=[e for e in t.examples if sees(e.stream)])
                       for sid, t in verdict.results.items()}
            kept._latest[key] = (time, replace(verdict, results=results))
        return kept

    def __len__(self) -> int:
        return len(self._latest)

    def report(self) -> list[ClientVerdict]:
        """Clients that fail first (most failing statements), then by name."""
        return sorted((v for _, v in self._latest.values()), key=lambda v: (-len(v.failing), v.key))

    def of(self, publisher: Publisher | None) -> ClientVerdict | None:
        found = self._latest.get(client_key(publisher))
        return found[1] if found else None

    def nonconforming(self) -> dict[str, str]:
        """client -> the statements it fails: the checks' BATCH_030."""
        return {v.name: ", ".join(f"{s} ({STATEMENTS[s].title})" for s in v.failing)
                for v in self.report() if v.failing}
