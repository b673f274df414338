"""JetStream batch error codes, with the server's own descriptions (nats-server 2.14+).

Where ADR-50 disagrees (fast-ingest codes 10203-10206 in the ADR), this follows the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class BatchKind(str, Enum):
    ATOMIC = "atomic"
    FAST = "fast"


@dataclass(frozen=True)
class ErrorCode:
    err_code: int
    http: int
    description: str
    kind: BatchKind | None
    trigger: str
    category: str | None = None  # what a publisher is told: the errors module raises one class per category


_TABLE = (
    ErrorCode(10174, 400, "atomic publish is disabled", BatchKind.ATOMIC, "stream lacks allow_atomic", "disabled"),
    ErrorCode(10175, 400, "atomic publish sequence is missing", BatchKind.ATOMIC,
              "Nats-Batch-Sequence missing or not a number"),
    ErrorCode(10176, 400, "atomic publish batch is incomplete", BatchKind.ATOMIC,
              "gap; unknown batch with seq != 1; EOB at seq 1; after a timeout; every later message of a failed batch",
              "incomplete"),
    ErrorCode(10177, 400, "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id", BatchKind.ATOMIC,
              "Nats-Expected-Last-Msg-Id in a batch (raised at commit)"),
    ErrorCode(10179, 400, "atomic publish batch ID is invalid", BatchKind.ATOMIC, "batch id of 65+ characters"),
    ErrorCode(10199, 400, "atomic publish batch is too large", BatchKind.ATOMIC,
              "more messages than the server's max (description ends with ': <max>')", "too_large"),
    ErrorCode(10200, 400, "atomic publish batch commit is invalid", BatchKind.ATOMIC,
              "Nats-Batch-Commit other than 1 or eob"),
    ErrorCode(10201, 400, "atomic publish batch contains duplicate message id", BatchKind.ATOMIC,
              "Nats-Msg-Id already stored or repeated in the batch", "duplicate_message_id"),
    ErrorCode(10210, 429, "atomic publish too many inflight", BatchKind.ATOMIC,
              "too many open atomic batches on the stream (50) or server (1000)", "too_many_inflight"),
    ErrorCode(10185, 412, "JetStream minimum api level required", None,
              "Nats-Required-Api-Level too high or not a number", "api_level"),
    ErrorCode(10205, 400, "batch publish is disabled", BatchKind.FAST, "stream lacks allow_batched", "disabled"),
    ErrorCode(10206, 400, "batch publish pattern is invalid", BatchKind.FAST,
              "bad op, seq or gap mode, or a missing batch id token"),
    ErrorCode(10207, 400, "batch publish ID is invalid", BatchKind.FAST, "batch id of 65+ characters"),
    ErrorCode(10208, 400, "batch publish ID unknown", BatchKind.FAST,
              "unknown batch, after a timeout, or after a fail-mode gap ended it", "id_unknown"),
    ErrorCode(10211, 429, "batch publish too many inflight", BatchKind.FAST,
              "too many open fast batches on the stream (1000) or server (50,000)", "too_many_inflight"),
    ErrorCode(10052, 500, "async persist mode is not supported with atomic batch publish", None,
              "the server's generic invalid stream config code; also 'stream configuration update can not"
              " change persist mode'"),
    ErrorCode(10198, 400, "stream mirrors can not also use atomic publishing", None,
              "stream config: mirror with allow_atomic"),
    ErrorCode(10209, 400, "stream mirrors can not also use batch publishing", None,
              "stream config: mirror with allow_batched"),
)

ERROR_CODES: dict[int, ErrorCode] = {e.err_code: e for e in _TABLE}


def describe(err_code: int) -> str:
    """The server's description for an err_code, or a neutral text for codes outside the table."""
    known = ERROR_CODES.get(err_code)
    return known.description if known else f"JetStream error {err_code}"
