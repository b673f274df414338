"""A conformance statement: the ADR's words and what on the wire shows it, with the hooks the grader
calls as it reads a batch (each statement grades only itself, from the batch as seen so far), and
the batch record those hooks read."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar, Mapping, Protocol

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
ON_PUBLISH_SIDE, ON_REPLIES = "the publish side", "the server's replies on its inbox (any client of the account can forge them)"
UNKNOWN_BATCH, TOO_MANY_FAST, TOO_MANY_ATOMIC, INVALID_ID = 10208, 10211, 10210, 10207


class Limits(Protocol):
    """What the grader knows of the server: the statements that depend on its limits read them here."""

    batch_timeout: timedelta
    max_batch_size: int | None


@dataclass
class Graded:
    """One batch: what was seen of it, and each statement's result (a failure sticks)."""

    kind: str  # "fast" | "atomic"
    batch_id: str
    prefix: str
    first: datetime
    last: datetime
    stream: str | None = None
    results: dict[str, str | None] = field(default_factory=dict)  # statement -> None (pass) | why it failed
    ended: str | None = None  # "commit" | "refused" | "fail_end"
    ended_at: datetime | None = None
    end_seq: int = 0
    publish_side: bool = False
    # fast
    tokens: tuple[str, str, str] | None = None  # prefix, flow, gap mode of the first message seen
    requested: int = 0
    granted: int = 0
    acked: int = 0
    answered: bool = False  # the start had a reply
    starts: dict[str, int] = field(default_factory=dict)  # where a start was seen ("reply", "publish") -> times
    sent: int = 0  # highest sequence seen on the publish side
    last_sent: datetime | None = None
    last_reply: datetime | None = None
    # What the statements' results rest on: replies on the publisher's inbox, which any client of the
    # account may publish, or the publish side; a failure only replies show is unconfirmed
    source: str = ON_REPLIES  # what is being read now
    rests_on: dict[str, str] = field(default_factory=dict)  # a failing statement -> what shows it
    passed_on_publish_side: set[str] = field(default_factory=set)

    def passes(self, statement: str) -> None:
        self.results.setdefault(statement, None)
        if self.source == ON_PUBLISH_SIDE:
            self.passed_on_publish_side.add(statement)

    def fails(self, statement: str, why: str) -> None:
        if self.results.get(statement) is None or \
                (self.source == ON_PUBLISH_SIDE and self.rests_on.get(statement) == ON_REPLIES):
            self.results[statement] = why[:300]
            self.rests_on[statement] = self.source

    def grade(self, statement: str, why_it_fails: str | None) -> None:
        """Passes when there is no reason it fails."""
        if why_it_fails is None:
            self.passes(statement)
        else:
            self.fails(statement, why_it_fails)

    def contradicted(self, statement: str) -> bool:
        """Failing on replies alone while the publish side saw it pass."""
        return self.rests_on.get(statement) == ON_REPLIES and statement in self.passed_on_publish_side

    @property
    def in_flight(self) -> int:
        """Messages a client may have sent before it heard its batch end: refusals for them are no fault."""
        return (WINDOWS + SLACK_WINDOWS) * max(self.requested, 1)


DEFINED: list[type[Statement]] = []  # every statement class, in the order its module defines it


class Statement:
    """One checkable rule of ADR-50 for clients. A subclass names itself (`id`), quotes the ADR and
    overrides the hooks that show it; the grader calls only the hooks a statement overrides. A hook
    sees the batch before the grader records what the message did to it."""

    id: ClassVar[str]
    kind: ClassVar[str]  # FAST, ATOMIC or BOTH
    title: ClassVar[str]
    section: ClassVar[str]
    adr: ClassVar[str]  # the ADR's words, verbatim
    passes: ClassVar[str]
    fails: ClassVar[str]
    evidence: ClassVar[tuple[str, ...]]  # what can show it: REPLIES, PUBLISH_SIDE

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "id" in cls.__dict__:  # a statement, not a shared base of some
            DEFINED.append(cls)

    @property
    def needs_publish_side(self) -> bool:
        return REPLIES not in self.evidence

    # -- fast-ingest batches: either side (a reply names what the publisher sent) --------------
    def on_fast_id(self, batch: Graded, batch_id: str) -> None:
        """Each message or reply naming the batch, with its id as written."""

    def on_fast_subject(self, batch: Graded, tokens: tuple[str, str, str]) -> None:
        """A later message or reply's prefix, flow and gap mode (batch.tokens: the first one's)."""

    def on_fast_start(self, batch: Graded, seq: int, times: int) -> None:
        """A start (op 0) at `seq`, the `times`-th seen on this side."""

    def on_ended(self, batch: Graded, how: str) -> None:
        """The batch ended: "commit", "refused" or "fail_end"."""

    # -- fast-ingest batches: the server's replies -------------------------------------------------
    def on_server_error(self, batch: Graded, batch_id: str, code: int) -> None:
        """A reply carrying the server's error code."""

    def on_ping_acked(self, batch: Graded, seq: int) -> None:
        """The flow ack answering a ping at `seq` (batch.acked: the server's acknowledged sequence)."""

    def on_unknown_batch(self, batch: Graded, seq: int, now: datetime, limits: Limits) -> None:
        """10208 for message `seq`: the server does not know the batch (ended, idle, a new leader)."""

    # -- fast-ingest batches: the publish side -----------------------------------------------------
    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        """A message published with op `op` at `seq` (batch.sent, batch.last_sent: before it)."""

    # -- atomic batches (the publish side) ---------------------------------------------------------
    def on_atomic_first(self, batch: Graded, batch_id: str, seq: int | None) -> None:
        """A new batch's first message seen, with its id as written."""

    def on_atomic_again(self, batch: Graded, seq: int | None) -> None:
        """A message of a batch already seen (batch.ended: whether it had ended)."""

    def on_atomic_sent(self, batch: Graded, seq: int | None, seq_text: str, reply: str | None,
                       headers: Mapping[str, str], limits: Limits) -> None:
        """A message of the batch (seq None: its sequence header is not a number; batch.sent: before it)."""

    def on_atomic_commit(self, batch: Graded, commit: str, seq: int, headers: Mapping[str, str]) -> None:
        """A message carrying a commit header."""

    # -- both --------------------------------------------------------------------------------------
    def on_busy(self, batch: Graded, this_second: int, seconds_in_a_row: int) -> None:
        """A 429 (too many batches in flight): the prefix's refusals this second, and how many seconds
        before this one in a row were over BACKOFF_RATE."""
