"""The conformance statements for batch publishers: the checkable rules of ADR-50 for clients, each
with the ADR's words (its section), what on the wire shows a pass or a failure, and whether the
replies alone show it or the publish side (`--tap-publish-side`) is needed; and a client's verdict
as the collector writes it to the event log (read back by the page, the CLI and the checks: hostile
input, so parsed totally). The grading itself is console/domain/grader.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from collections import OrderedDict
from typing import TYPE_CHECKING, Mapping

from console.domain.publisher import Publisher, publisher_from_dict
from console.domain.wire import MAX_LABEL, MalformedInput, bounded_int, bounded_text, load_object

if TYPE_CHECKING:
    from console.domain.events import BatchEvent

REPLIES, PUBLISH_SIDE = "replies", "publish side"
FAST, ATOMIC, BOTH = "fast", "atomic", "both"
FAST_SECTION = "Fast-ingest Batch Publishing"
ATOMIC_SECTION = "Atomic Batched Publishes"
# Outstanding messages a client may have: the ADR's largest outstanding-acks setting (3) times the
# flow, plus one flow for an ack the console heard after the publisher did.
WINDOWS = 3
SLACK_WINDOWS = 1
BACKOFF_RATE = 10  # 429 refusals a second, over BACKOFF_SECONDS in a row, is a retry without back-off
BACKOFF_SECONDS = 2


@dataclass(frozen=True)
class Statement:
    id: str
    kind: str  # FAST, ATOMIC or BOTH
    title: str
    section: str
    adr: str  # the ADR's words, verbatim
    passes: str
    fails: str
    evidence: tuple[str, ...]  # what can show it: REPLIES, PUBLISH_SIDE

    @property
    def needs_publish_side(self) -> bool:
        return REPLIES not in self.evidence


def _s(id: str, kind: str, title: str, section: str, adr: str, passes: str, fails: str,
       *evidence: str) -> Statement:
    return Statement(id, kind, title, section, adr, passes, fails, tuple(evidence))


STATEMENTS: dict[str, Statement] = {s.id: s for s in (
    _s("F01", FAST, "a fast batch starts with op 0 at sequence 1", f"{FAST_SECTION} / Client Design",
       "A batch will be started by setting a reply subject of `<prefix>.uuid.10.ok.1.0.$FI`",
       "the batch's first message is op 0, sequence 1", "a start (op 0) at another sequence, or a batch whose first "
       "message seen is not a start", REPLIES, PUBLISH_SIDE),
    _s("F02", FAST, "waits for the first reply before going on", f"{FAST_SECTION} / Client Design",
       "The client MUST wait for the first reply to detect if the feature is available on the server or Stream, "
       "and what flow control settings the server allows the client to start at.",
       "message 2 comes after the server answered the start", "message 2 or later sent before the start's answer",
       PUBLISH_SIDE),
    _s("F03", FAST, "sequences are contiguous", f"{FAST_SECTION} / Client Design",
       "Following messages in the same batch must use a reply subject `<prefix>.uuid.10.ok.n.1.$FI` where `n` is "
       "the sequence incremented by one.", "each message's sequence is the previous one plus one",
       "a sequence skipped, repeated or going back", PUBLISH_SIDE),
    _s("F04", FAST, "flow, gap mode and inbox stay those of the start", f"{FAST_SECTION} / Client Design",
       "We add the initial flow and gap information for replica followers who might have missed the first message "
       "due to limits", "every reply subject of the batch carries the start's prefix, flow and gap mode",
       "a message of the batch with another prefix, flow or gap mode", REPLIES, PUBLISH_SIDE),
    _s("F05", FAST, "keeps within its outstanding-ack window", f"{FAST_SECTION} / Flow Control",
       "Clients will not wait for each ack like they would in a standard JS Publish instead they will maintain a "
       "count of maximum outstanding acknowledgements from the server, this is part flow-control and part outage "
       "detection.", f"messages sent beyond the last ack stay within {WINDOWS} windows of the flow it asked for",
       f"more than {WINDOWS}(+{SLACK_WINDOWS}) windows of its own requested flow outstanding", PUBLISH_SIDE),
    _s("F06", FAST, "follows the flow the server grants", f"{FAST_SECTION} / Client Design",
       "Clients will monitor the `BatchFlowAck` acks and should an ack have different flow settings different from "
       "the active one they will adjust accordingly.",
       f"within {WINDOWS} windows of the flow last granted", "within its requested flow's windows, but beyond those "
       "of a lower flow the server granted", PUBLISH_SIDE),
    _s("F07", FAST, "a ping carries the highest sequence sent", f"{FAST_SECTION} / Client Design",
       "The sequence in the ping message must not itself increment the batch sequence; instead, it should be the "
       "highest batch sequence the client has sent.", "a ping (op 4) at the highest sequence sent",
       "a ping above the highest sequence sent, or below one the server already acknowledged", REPLIES, PUBLISH_SIDE),
    _s("F08", FAST, "keeps a stalled batch alive", f"{FAST_SECTION} / Client Design",
       "The client may send a ping message to keep the batch alive and receive (missed) flow control messages.",
       "no silence past the batch timeout between a batch's messages", "a silence past the batch timeout (no "
       "message, no ping), then more of the batch: refused 10208 without a leader change", REPLIES, PUBLISH_SIDE),
    _s("F09", FAST, "stops a batch the server no longer knows (10208)", f"{FAST_SECTION} / Control Channel",
       "Clients should use old style inboxes not the mux inbox so that as soon as the server sends an error back "
       "the clients would drop interest.", "after a 10208, only messages already in flight are refused",
       "refusals for messages sent well after the first 10208", REPLIES),
    _s("F10", FAST, "stops at a fail-mode gap", f"{FAST_SECTION} / Message Gaps",
       "The client will receive the gap message first, and should use this to stop sending messages before "
       "eventually receiving the final ack.", "after the fail-mode end, only messages in flight are refused",
       "messages sent well after the batch ended at its gap", REPLIES),
    _s("F11", FAST, "a batch id has at most 64 characters", f"{FAST_SECTION} / Client Design",
       "Maximum length of the ID is 64 characters.", "ids of 1 to 64 characters", "an id of 65 or more (10207)",
       REPLIES, PUBLISH_SIDE),
    _s("F12", FAST, "a batch id is not reused while its batch is open", f"{FAST_SECTION} / Client Design",
       "A batch will be started by setting a reply subject of `<prefix>.uuid.10.ok.1.0.$FI`",
       "each start names an id not open", "a start naming the id of a batch still open", REPLIES, PUBLISH_SIDE),
    _s("A01", ATOMIC, "an atomic batch starts with a request", f"{ATOMIC_SECTION} / Client Design",
       "A batch will be started by adding the `Nats-Batch-Id:uuid` and `Nats-Batch-Sequence:1` headers using a "
       "*request*", "message 1 has a reply subject", "message 1 sent without a reply subject", PUBLISH_SIDE),
    _s("A02", ATOMIC, "atomic sequences are contiguous from 1", f"{ATOMIC_SECTION} / Client Design",
       "Following messages in the same batch will include the `Nats-Batch-Id:uuid` header and increment "
       "`Nats-Batch-Sequence:n` by one", "1, 2, 3, ... to the commit", "a sequence skipped, repeated, not a number, "
       "or a batch whose first message is not 1", PUBLISH_SIDE),
    _s("A03", ATOMIC, "a commit value is 1 or eob", f"{ATOMIC_SECTION} / Client Design",
       "If the final message has the headers `Nats-Batch-Id:uuid`, `Nats-Batch-Sequence:n` and "
       "`Nats-Batch-Commit:1` [...] Otherwise, the final message will have headers [...] `Nats-Batch-Commit:eob`",
       "`Nats-Batch-Commit` is `1` or `eob`", "any other commit value", PUBLISH_SIDE),
    _s("A04", ATOMIC, "EOB is never message 1", f"{ATOMIC_SECTION} / Client Design",
       "the final message will have headers `Nats-Batch-Id:uuid`, `Nats-Batch-Sequence:n` and "
       "`Nats-Batch-Commit:eob` and the server will commit the batch without storing the message",
       "an eob commit ends a batch of one or more messages", "an eob commit at sequence 1: a batch with nothing "
       "in it (2.14+: 10176 and an advisory)", PUBLISH_SIDE),
    _s("A05", ATOMIC, "an atomic batch id has at most 64 characters", f"{ATOMIC_SECTION} / Client Design",
       "Maximum length of the ID is 64 characters.", "ids of 1 to 64 characters", "an id of 65 or more (10179)",
       PUBLISH_SIDE),
    _s("A06", ATOMIC, "an atomic batch stays within the server's maximum size", f"{ATOMIC_SECTION} / Server Behavior "
       "Design", "Each batch can have maximum 1000 messages", "every sequence within the server's max batch size",
       "a sequence past it (10199)", PUBLISH_SIDE),
    _s("A07", ATOMIC, "an eob commit requires the API level that has it", f"{ATOMIC_SECTION} / Client Design "
       "(revision 5)", "When `Nats-Batch-Commit:eob` is used to commit the final message if the "
       "`Nats-Required-Api-Level` is set it should be evaluated. Using the `eob` option should require level `3`.",
       "an eob commit carries `Nats-Required-Api-Level` of 3 or more", "an eob commit without it: an older "
       "server stores the batch without its marker or refuses it unexplained", PUBLISH_SIDE),
    _s("A08", ATOMIC, "an atomic batch id is not reused while its batch is open", f"{ATOMIC_SECTION} / Client Design",
       "A batch will be started by adding the `Nats-Batch-Id:uuid` and `Nats-Batch-Sequence:1` headers",
       "each message 1 names an id not open", "a message 1 naming the id of a batch still open", PUBLISH_SIDE),
    _s("B01", BOTH, "backs off when refused for too many batches in flight (10210, 10211)", f"{FAST_SECTION} / Context",
       "We will therefor create a flow-control mechanism where the server can tell the clients to go slower.",
       "after a 429 the client's next starts slow down", f"refused 429 more than {BACKOFF_RATE} times a second for "
       f"{BACKOFF_SECONDS} seconds in a row: retrying without back-off", REPLIES),
)}

PASS, FAIL, NOT_OBSERVED, CANNOT_TELL = "pass", "fail", "not observed", "cannot tell without the publish side"
UNCONFIRMED = "unconfirmed: rests on replies alone"  # any client of the account may publish on an inbox
ON_PUBLISH_SIDE, ON_REPLIES = "the publish side", "the server's replies on its inbox (any client of the account can forge them)"
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

    @property
    def unconfirmed(self) -> list[str]:
        """Statements only replies on its inbox say it fails: not a verdict against it, said as such."""
        return [s for s in STATEMENTS if self.status(s) == UNCONFIRMED]

    @property
    def name(self) -> str:
        return self.publisher.line() if self.publisher else "(publisher unknown)"

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
