"""Typed replies of batch publishing: what the server sends to a batch message's reply subject.

Unknown JSON fields are ignored; anything that is not one of these shapes is a MalformedReply.
"""

from __future__ import annotations

import re
from typing import Any
from dataclasses import dataclass
from functools import partial

from console.domain.fast_ingest import MAX_FLOW
from console.domain.wire import INT64_MAX, MalformedInput, bounded_int, bounded_text, label, load_object, stream_name


# The server's flow ack and gap, byte for byte (nats-server 2.14+), read without the JSON parser: most of
# what the `$FI` tap hears. Anything else takes the full parser. Digits bounded so the values stay in int64.
PLAIN_ACK = re.compile(rb'\{"type":"ack","seq":(0|[1-9]\d{0,17}),"msgs":([1-9]\d{0,4})\}')
PLAIN_GAP = re.compile(rb'\{"type":"gap","last_seq":([1-9]\d{0,17}),"seq":([1-9]\d{0,17})\}')


class MalformedReply(MalformedInput):
    """A reply body that is not one of the known shapes; `reason` says why."""

    what = "batch reply"


@dataclass(frozen=True, slots=True)
class Staged:
    """Empty reply: an atomic staging message was accepted."""


@dataclass(frozen=True, slots=True)
class ApiError:
    err_code: int
    description: str
    code: int = 400
    stream: str | None = None


@dataclass(frozen=True, slots=True)
class FlowAck:
    """`{"type":"ack","seq":S,"msgs":N}`: messages up to S persisted; acks now come every N messages."""

    seq: int
    msgs: int


@dataclass(frozen=True, slots=True)
class FlowGap:
    """`{"type":"gap","last_seq":L,"seq":S}`: L is the FIRST lost sequence, so S - L messages were lost."""

    first_lost_seq: int
    seq: int

    @property
    def lost(self) -> int:
        return self.seq - self.first_lost_seq


@dataclass(frozen=True, slots=True)
class FlowError:
    """`{"type":"err","seq":S,"error":{...}}`: message S failed a per-message check (ok mode)."""

    seq: int
    error: ApiError


@dataclass(frozen=True, slots=True)
class PubAck:
    """The final reply of a committed batch. `seq` is 0 when nothing was stored."""

    stream: str
    seq: int
    batch: str | None = None
    count: int | None = None
    duplicate: bool = False
    domain: str | None = None


Reply = Staged | ApiError | FlowAck | FlowGap | FlowError | PubAck

_STAGED = Staged()


_int = partial(bounded_int, error=MalformedReply)


def _api_error(err: object, stream: object = None) -> ApiError:
    if not isinstance(err, dict):
        raise MalformedReply("'error' is not an object")
    if not isinstance(err.get("description"), str):
        raise MalformedReply("error without a description")
    return ApiError(
        _int(err.get("err_code"), "err_code", 0, 2**31 - 1),
        bounded_text(err["description"], "description", error=MalformedReply),
        _int(err.get("code", 400), "code", 0, 999),
        None if stream is None else stream_name(stream, error=MalformedReply),
    )


def to_reply(data: bytes | str) -> Reply:
    """Decode one reply body; MalformedReply for anything else, whatever the bytes."""
    if not data:
        return _STAGED
    if isinstance(data, bytes) and (gap := PLAIN_GAP.fullmatch(data)) is not None and 1 <= (first := int(gap[1])) < (seq := int(gap[2])):
        return FlowGap(first, seq)
    return _decode(load_object(data, MalformedReply))  # the raw body is the caller's to keep (quarantine)


def _decode(obj: dict[str, Any]) -> Reply:
    kind = obj.get("type")
    if kind == "ack":
        return FlowAck(_int(obj.get("seq"), "seq"), _int(obj.get("msgs"), "msgs", 1, MAX_FLOW))  # a flow, never 0
    if kind == "gap":
        seq = _int(obj.get("seq"), "seq", 2)
        return FlowGap(_int(obj.get("last_seq"), "last_seq", 1, seq - 1), seq)
    if kind == "err":
        return FlowError(_int(obj.get("seq"), "seq"), _api_error(obj.get("error")))
    if kind is not None:
        raise MalformedReply(f"unknown type {str(kind)[:64]!r}")
    if "error" in obj:
        return _api_error(obj["error"], obj.get("stream"))
    if obj.get("stream") is None:
        raise MalformedReply("PubAck without a stream")
    batch, count = obj.get("batch"), obj.get("count")
    return PubAck(
        stream=stream_name(obj["stream"], error=MalformedReply),
        seq=_int(obj.get("seq"), "seq"),
        batch=None if batch is None else bounded_text(batch, "batch", 64, MalformedReply),
        count=None if count is None else _int(count, "count", 0, INT64_MAX),
        duplicate=obj.get("duplicate") is True,
        domain=label(obj, "domain"),
    )
