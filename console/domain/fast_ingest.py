"""The fast-ingest reply-subject grammar: `<prefix>.<batch-id>.<flow>.<ok|fail>.<seq>.<op>.$FI`.

Tokens are read from the right, so the prefix may have any depth of one or more tokens
(`_INBOX` gives 7 tokens in all, `_INBOX.<nuid>` gives 8).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from enum import Enum, IntEnum

from console.domain.wire import INT64_MAX, MalformedInput

FI_SUFFIX = "$FI"
_NOT_IN_TOKEN = re.compile(r"[\x00-\x20\x7f.*>]")  # a subject token: no separators, wildcards, white space
MAX_BATCH_ID_LEN = 64
DEFAULT_FLOW = 10  # what the server uses for a flow <= 0 or not a number
MAX_FLOW = 65535
SERVER_MAX_GRANTED_FLOW = 500


class FastOp(IntEnum):
    START = 0
    APPEND = 1
    COMMIT = 2  # commit and store this message
    EOB = 3  # commit without storing this message
    PING = 4  # carries the highest seq sent; does not increment


class GapMode(str, Enum):
    OK = "ok"  # report the gap and go on
    FAIL = "fail"  # end the batch at the gap

    def __str__(self) -> str:
        return self.value


_GAP_MODES = {mode.value: mode for mode in GapMode}
_OPS = {str(int(op)): op for op in FastOp}


class InvalidReplySubject(MalformedInput):
    """A subject that is not a valid fast-ingest reply; `reason` says which rule it breaks."""

    what = "fast-ingest reply subject"

    def __init__(self, subject: str, reason: str):
        super().__init__(reason, subject[:200])
        self.subject = subject


_set = object.__setattr__  # a frozen dataclass's fields, set once by parse


def server_flow(requested: str | int) -> int:
    """The flow the server reads from the subject: <= 0 or not a number gives 10, above 65535 gives 65535."""
    if type(requested) is str and requested.isdigit() and requested.isascii() and len(requested) <= 5:
        return min(int(requested), MAX_FLOW) or DEFAULT_FLOW  # the subject's usual case, without a try
    try:
        flow = int(requested)
    except (TypeError, ValueError):
        return DEFAULT_FLOW
    if flow <= 0:
        return DEFAULT_FLOW
    return min(flow, MAX_FLOW)


def new_batch_id() -> str:
    """A fresh batch id (32 hex characters), valid for both kinds of batch."""
    return uuid.uuid4().hex


def check_batch_id(batch_id: str) -> None:
    """Raise ValueError unless the id is 1..64 characters and a single subject token."""
    if not batch_id:
        raise ValueError("batch id is empty")
    if len(batch_id) > MAX_BATCH_ID_LEN:
        raise ValueError(f"batch id has {len(batch_id)} characters, the server allows {MAX_BATCH_ID_LEN}")
    if _NOT_IN_TOKEN.search(batch_id) is not None:
        raise ValueError(f"batch id {batch_id!r} must be one subject token (no '.', '*', '>' or white space)")


# The sequences each op may carry, by the op's token: the server's rules tying the sequence to the operation.
_SEQS_OF_OP = {token: (1, 1) if op is FastOp.START else (2, INT64_MAX) if op in (FastOp.APPEND, FastOp.EOB)
               else (1, INT64_MAX) for token, op in _OPS.items()}


def check_seq_for_op(seq: int, op: FastOp) -> None:
    """The server's rules tying the sequence to the operation."""
    low, high = _SEQS_OF_OP[str(int(op))]
    if low <= seq <= high:
        return
    if seq < 1:
        raise ValueError(f"seq {seq} is below 1")
    if op is FastOp.START and seq != 1:
        raise ValueError(f"start (op 0) needs seq 1, got {seq}")
    if op is FastOp.APPEND and seq == 1:
        raise ValueError("append (op 1) needs seq > 1")
    if op is FastOp.EOB and seq == 1:
        raise ValueError("commit without storing (op 3) is not allowed at seq 1")
    raise ValueError(f"seq {seq} does not fit op {int(op)}")


def well_formed(parts: list[str]) -> bool:
    """Whether a reply subject split from the right (`rsplit(".", 6)`) is one the server takes, by a few
    string checks: what FastReplySubject.parse reads without going token by token."""
    if len(parts) != 7 or parts[6] != FI_SUFFIX:
        return False
    prefix, batch_id, _, gap_s, seq_s, op_s, _ = parts
    seqs = _SEQS_OF_OP.get(op_s)
    return (seqs is not None and gap_s in _GAP_MODES and prefix != "" and prefix[0] != "." and prefix[-1] != "."
            and ".." not in prefix and 0 < len(batch_id) <= MAX_BATCH_ID_LEN and _NOT_IN_TOKEN.search(batch_id) is None
            and seq_s.isascii() and seq_s.isdigit() and len(seq_s) <= 19 and seqs[0] <= int(seq_s) <= seqs[1])


@dataclass(frozen=True, slots=True)
class FastReplySubject:
    prefix: str
    batch_id: str
    flow: int
    gap_mode: GapMode
    seq: int
    op: FastOp

    def __post_init__(self) -> None:
        if not self.prefix or "" in self.prefix.split("."):
            raise ValueError("prefix needs one or more non-empty tokens")
        check_batch_id(self.batch_id)
        if not 1 <= self.flow <= MAX_FLOW:
            raise ValueError(f"flow {self.flow} is outside 1..{MAX_FLOW}")
        check_seq_for_op(self.seq, self.op)

    def format(self) -> str:
        return f"{self.prefix}.{self.batch_id}.{self.flow}.{self.gap_mode.value}.{self.seq}.{int(self.op)}.{FI_SUFFIX}"

    @classmethod
    def parse(cls, subject: str) -> FastReplySubject:
        """Parse a reply subject the way the server does; InvalidReplySubject names the broken rule.
        A well-formed one takes a few string checks (a flood of them is the tap's hot path); anything
        else is read token by token to say what is wrong."""
        parts = subject.rsplit(".", 6)
        if well_formed(parts):
            prefix, batch_id, flow_s, gap_s, seq_s, op_s, _ = parts
            found = object.__new__(cls)  # every field checked: __post_init__'s checks again are waste
            _set(found, "prefix", prefix)
            _set(found, "batch_id", batch_id)
            _set(found, "flow", server_flow(flow_s))
            _set(found, "gap_mode", _GAP_MODES[gap_s])
            _set(found, "seq", int(seq_s))
            _set(found, "op", _OPS[op_s])
            return found
        return cls._parse_slowly(subject)

    @classmethod
    def _parse_slowly(cls, subject: str) -> FastReplySubject:
        tokens = subject.split(".")
        if len(tokens) < 7:
            raise InvalidReplySubject(subject, f"{len(tokens)} tokens, needs at least 7 (a prefix token, then 6)")
        if tokens[-1] != FI_SUFFIX:
            raise InvalidReplySubject(subject, f"last token is {tokens[-1]!r}, not {FI_SUFFIX!r}")
        prefix_tokens = tokens[:-6]
        batch_id, flow_s, gap_s, seq_s, op_s = tokens[-6:-1]
        if "" in prefix_tokens:
            raise InvalidReplySubject(subject, "empty prefix token")
        try:
            check_batch_id(batch_id)
        except ValueError as e:
            raise InvalidReplySubject(subject, str(e)) from None
        try:
            gap_mode = GapMode(gap_s)
        except ValueError:
            raise InvalidReplySubject(subject, f"gap mode {gap_s!r} is not 'ok' or 'fail'") from None
        if not (seq_s.isascii() and seq_s.isdigit()) or int(seq_s) > INT64_MAX:
            raise InvalidReplySubject(subject, f"seq {seq_s[:30]!r} is not a number up to {INT64_MAX}")
        if op_s not in ("0", "1", "2", "3", "4"):
            raise InvalidReplySubject(subject, f"op {op_s!r} is not one of 0-4")
        op, seq = FastOp(int(op_s)), int(seq_s)
        try:
            check_seq_for_op(seq, op)
        except ValueError as e:
            raise InvalidReplySubject(subject, str(e)) from None
        return cls(".".join(prefix_tokens), batch_id, server_flow(flow_s), gap_mode, seq, op)


def reply_prefix(inbox_prefix: str, batch_id: str, flow: int, gap_mode: GapMode) -> str:
    """The constant head of a batch's reply subjects; the publisher appends `<seq>.<op>.$FI`."""
    return FastReplySubject(inbox_prefix, batch_id, flow, gap_mode, 1, FastOp.START).format()[: -len("1.0.$FI")]
