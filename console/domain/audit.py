"""The audit trail: one record for every action the console was asked to take, accepted or refused.

Records form a chain: each carries the hash of the record before it, and the console signs each
with its key (signing.py). A record removed from the stream breaks the chain at the next one (and
leaves a hole in the stream's sequences); an altered or forged one fails its signature. The trail
is bounded by count only (its newest KEPT records), so records missing before that are erased, not
aged out; and the newest record the console wrote (its Head) is kept outside the stream, where the
account's clients cannot reach it: a purge, a deleted stream or a truncation is found against it.

An action's attempt is recorded before it is taken ("attempted") and its outcome after: an action
whose attempt cannot be stored is not taken."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Mapping

from console.domain.signing import forgery
from console.domain.wire import (
    MAX_LABEL, MAX_TEXT, MalformedInput, bounded_text, bounded_time, load_object, printable,
)

GENESIS = "0" * 64  # the `previous` of the first record ever written
KEPT = 100_000  # records the trail keeps: the oldest go first, and only by count


class Outcome(enum.StrEnum):
    """What became of an action, as its audit record says it (the text is the record's)."""

    ATTEMPTED = "attempted"  # written ahead, before the action is taken
    ACCEPTED = "accepted"
    READ_ONLY = "refused: read-only"
    ROLE = "refused: role"
    SESSION_EXPIRED = "refused: session expired"
    SERVER = "refused: server"  # the NATS server's own refusal, with its code
    INVALID = "refused: invalid"
    FAILED = "failed"
    UNAUTHENTICATED = "refused: unauthenticated"
    NO_TRAIL = "refused: no trail"  # never recorded: there is no trail to record it in
    # never recorded either: an attempt the trail shows with no outcome after it (a long action, the continuous
    # canary, still running, or one that ended before it could say); "no outcome recorded" read as a failure
    NO_OUTCOME_YET = "attempted: no outcome yet (running, or it ended before it could record one)"


OUTCOMES = tuple(o.value for o in Outcome if o not in (Outcome.NO_TRAIL, Outcome.NO_OUTCOME_YET))
MAX_DIFF = 32  # settings a record's diff may name
MAX_RECORD = 16 * 1024


class MalformedAudit(MalformedInput):
    what = "audit record"


@dataclass(frozen=True)
class Actor:
    """Who asked: the login name ("local" on an unauthenticated loopback console, "notebook", "cli"),
    from where and with what (a browser's address and user agent, when there is one)."""

    user: str
    address: str = ""
    agent: str = ""

    def bounded(self) -> Actor:
        return Actor(_text(self.user, MAX_LABEL) or "?", _text(self.address, MAX_LABEL), _text(self.agent, MAX_LABEL))


NOTEBOOK = Actor("notebook")
CLI = Actor("cli")


@dataclass(frozen=True)
class AuditRecord:
    time: datetime
    actor: Actor
    action: str  # a command's name (console.commands.COMMANDS)
    target: str  # what it acted on: a stream, "stream/consumer seq N", a rule, a table
    outcome: Outcome
    detail: str = ""  # the server's code and text, or why it was refused
    diff: dict[str, list[object]] = field(default_factory=dict)  # setting -> [before, after], for an edit
    previous: str = GENESIS  # the hash of the record before it

    def body(self) -> bytes:
        obj = asdict(self)
        obj["time"] = self.time.astimezone(timezone.utc).isoformat()
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    @property
    def stream(self) -> str:
        """The stream the action touched, for filtering ('' when it was none)."""
        touches = self.action.startswith(("stream.", "message.", "consumer.", "probe.", "search.", "export.search"))
        return self.target.split("/", 1)[0].split(" ", 1)[0] if touches else ""


def chain_hash(body: bytes) -> str:
    """What the next record names as its `previous`."""
    return hashlib.sha256(body).hexdigest()


def _text(value: object, limit: int) -> str:
    return printable(str(value), limit)


def to_record(data: bytes) -> AuditRecord:
    """A record from its stored body; MalformedAudit for anything else."""
    obj = load_object(data, MalformedAudit, MAX_RECORD)
    actor = obj.get("actor")
    if not isinstance(actor, dict) or not all(isinstance(actor.get(k, ""), str) for k in ("user", "address", "agent")):
        raise MalformedAudit("actor is not an object of texts")
    texts = {k: obj.get(k, "") for k in ("action", "target", "outcome", "detail", "previous")}
    if not all(isinstance(v, str) for v in texts.values()):
        raise MalformedAudit("a field is not a text")
    if texts["outcome"] not in OUTCOMES:
        raise MalformedAudit("unknown outcome", texts["outcome"][:40])
    previous = texts["previous"]
    if len(previous) != 64 or any(c not in "0123456789abcdef" for c in previous):
        raise MalformedAudit("previous is not a hash")
    diff = obj.get("diff", {})
    if not isinstance(diff, dict) or len(diff) > MAX_DIFF or not all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, (str, int, float, bool)) or x is None for x in v)
            for v in diff.values()):
        raise MalformedAudit("diff is not setting -> [before, after]")
    try:
        when = bounded_time(datetime.fromisoformat(bounded_text(obj.get("time"), "time", 64, MalformedAudit)),
                            MalformedAudit)
    except ValueError as e:  # MalformedAudit is one; fromisoformat's own says the text is no time
        raise e if isinstance(e, MalformedAudit) else MalformedAudit("time is not an ISO time") from None
    return AuditRecord(when,
                       Actor(actor.get("user", ""), actor.get("address", ""), actor.get("agent", "")).bounded(),
                       _text(texts["action"], MAX_LABEL), _text(texts["target"], MAX_TEXT), Outcome(texts["outcome"]),
                       _text(texts["detail"], MAX_TEXT), {_text(k, MAX_LABEL): v for k, v in diff.items()}, previous)


@dataclass(frozen=True)
class Stored:
    """One message of the audit stream as read back: its sequence, body and headers."""

    seq: int
    body: bytes
    headers: Mapping[str, str] | None


@dataclass(frozen=True)
class Checked:
    """The trail as read and checked: the records that hold, and every break found (seq, why)."""

    records: list[tuple[int, AuditRecord]]
    breaks: list[tuple[int, str]]
    written: int = 0  # records the console wrote to this trail (its checkpoint's count; 0: not known)
    unsafe: str | None = None  # why the trail's stream can be erased quietly, when it can
    systems: tuple[str, ...] = ()  # several NATS systems' trails read as one (across): each record's system
    aged_out: int = 0  # the oldest records, gone past the trail's limit of KEPT as it was made to let them go

    def aged(self) -> str:
        """"; N older record(s) aged out ..." when the trail let records go at its limit, else ""."""
        return (f"; {self.aged_out:,} older record(s) aged out of the trail's limit of {KEPT:,} (the oldest kept is "
                f"record {self.aged_out + 1:,})") if self.aged_out else ""

    @classmethod
    def across(cls, trails: Mapping[str, Checked]) -> Checked:
        """Several systems' trails as one, oldest first, each record with its system; each chain checked on
        its own (a break names its system)."""
        rows = sorted(((r.time, name, seq, r) for name, checked in trails.items() for seq, r in checked.records),
                      key=lambda row: (row[0], row[1], row[2]))
        unsafe = "; ".join(f"{name}: {c.unsafe}" for name, c in trails.items() if c.unsafe)
        return cls([(seq, r) for _, _, seq, r in rows],
                   [(seq, f"system {name}: {why}") for name, c in trails.items() for seq, why in c.breaks],
                   sum(c.written for c in trails.values()), unsafe or None, tuple(name for _, name, _, _ in rows),
                   sum(c.aged_out for c in trails.values()))

    @property
    def intact(self) -> bool:
        return not self.breaks

    def counted(self) -> str:
        """"N record(s)" and how many of them this data directory's console wrote: the CLI's and the page's words."""
        written = f" ({self.written:,} written through this data directory's console)" if self.written else ""
        return f"{len(self.records):,} record(s){written}"


@dataclass(frozen=True)
class Head:
    """The newest record the console wrote (its stream sequence and chain hash), and how many records
    it has written: kept outside the stream (console.storage.audit_checkpoint)."""

    seq: int
    hash: str
    written: int = 0


def kept_from(last_seq: int) -> int:
    """The oldest sequence a trail ending at `last_seq` still keeps (it keeps its newest KEPT)."""
    return max(1, last_seq - KEPT + 1)


def erased_against(head: Head | None, last_seq: int, hash_at_head: str | None) -> str | None:
    """What the trail lost that the head says was written, or None: records after the stream's last
    (a purge, a deleted stream), or another record where the head was (erased and written again).
    `hash_at_head`: the chain hash of the record now at head.seq (None: there is none)."""
    if head is None or head.seq == 0:
        return None
    if head.seq > last_seq:
        return (f"{head.seq - last_seq:,} record(s) erased after record {last_seq} (the console wrote up to "
                f"record {head.seq}: the trail was purged, deleted or truncated)")
    if head.seq >= kept_from(last_seq) and hash_at_head is None:
        return f"record {head.seq}, the newest the console wrote, was erased"
    if head.seq >= kept_from(last_seq) and hash_at_head != head.hash:
        return (f"record {head.seq} is not the one the console wrote there: the trail was erased and written "
                "again")
    return None


def check(stored: list[Stored], key: bytes, first_seq: int, last_seq: int, head: Head | None = None,
          read_from: int | None = None) -> Checked:
    """Signatures, the chain and the stream's sequences (first_seq..last_seq as the stream reports
    them; 0 and 0 for a stream that never held a record): a hole is a removed record, a bad signature
    an altered or forged one; against the console's head, what was erased. `read_from`: where the
    reading began, when not at the stream's first record (a read from a time): holes are looked for
    from there, and a head before it is not looked at."""
    records: list[tuple[int, AuditRecord]] = []
    breaks: list[tuple[int, str]] = []
    if first_seq == 0:  # never held a record: nothing is missing from it
        first_seq = last_seq + 1
    oldest = kept_from(last_seq)
    if first_seq > oldest:
        breaks.append((oldest, f"records {oldest}..{first_seq - 1} were erased (the trail keeps its newest {KEPT:,})"))
    at_head = next((chain_hash(item.body) for item in stored if head is not None and item.seq == head.seq), None)
    # a head in a part not read (a read from a time), or in the erased part already said, is not looked at
    unread = head is not None and head.seq <= last_seq and head.seq < max(first_seq, read_from or 0)
    if not unread and (why := erased_against(head, last_seq, at_head)) is not None:
        breaks.append((min(head.seq, last_seq + 1) if head else 0, why))
    expected_seq, previous = max(first_seq, read_from or 0), None
    for item in stored:
        if item.seq > expected_seq:
            breaks.append((expected_seq, f"records {expected_seq}..{item.seq - 1} were removed"))
        expected_seq = item.seq + 1
        if (why := forgery(key, item.body, item.headers)) is not None:
            breaks.append((item.seq, f"altered or not the console's ({why})"))
            previous = None
            continue
        try:
            record = to_record(item.body)
        except MalformedAudit as e:
            breaks.append((item.seq, str(e)))
            previous = None
            continue
        if previous is not None and record.previous != previous:
            breaks.append((item.seq, "does not follow the record before it"))
        previous = chain_hash(item.body)
        records.append((item.seq, record))
    if last_seq >= expected_seq:
        breaks.append((expected_seq, f"records {expected_seq}..{last_seq} were removed"))
    return Checked(records, breaks, aged_out=min(first_seq, oldest) - 1 if first_seq <= last_seq else 0)
