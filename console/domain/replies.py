"""Typed replies of batch publishing: what the server sends to a batch message's reply subject.

Unknown JSON fields are ignored; anything that is not one of these shapes is a MalformedReply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


class MalformedReply(ValueError):
    """A reply body that is not one of the known shapes; `reason` says why."""

    def __init__(self, data: bytes | str, reason: str):
        shown = data if isinstance(data, str) else data[:200].decode("utf-8", "replace")
        super().__init__(f"malformed batch reply ({reason}): {shown!r}")
        self.reason = reason


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


def _int(obj: dict, key: str, data: bytes | str) -> int:
    value = obj.get(key)
    if type(value) is not int or value < 0:
        raise MalformedReply(data, f"{key!r} is not a non-negative integer")
    return value


def _api_error(err: object, data: bytes | str, stream: str | None = None) -> ApiError:
    if not isinstance(err, dict):
        raise MalformedReply(data, "'error' is not an object")
    description = err.get("description")
    if not isinstance(description, str):
        raise MalformedReply(data, "error without a description")
    code = err.get("code", 400)
    return ApiError(_int(err, "err_code", data), description, code if type(code) is int else 400, stream)


def to_reply(data: bytes | str) -> Reply:
    """Decode one reply body."""
    if not data:
        return _STAGED
    try:
        obj = json.loads(data)
    except ValueError:
        raise MalformedReply(data, "not JSON") from None
    if not isinstance(obj, dict):
        raise MalformedReply(data, "not a JSON object")
    kind = obj.get("type")
    if kind == "ack":
        return FlowAck(_int(obj, "seq", data), _int(obj, "msgs", data))
    if kind == "gap":
        return FlowGap(_int(obj, "last_seq", data), _int(obj, "seq", data))
    if kind == "err":
        return FlowError(_int(obj, "seq", data), _api_error(obj.get("error"), data))
    if kind is not None:
        raise MalformedReply(data, f"unknown type {kind!r}")
    stream = obj.get("stream")
    if "error" in obj:
        return _api_error(obj["error"], data, stream if isinstance(stream, str) else None)
    if not isinstance(stream, str) or not stream:
        raise MalformedReply(data, "PubAck without a stream")
    batch = obj.get("batch")
    count = obj.get("count")
    domain = obj.get("domain")
    return PubAck(
        stream=stream,
        seq=_int(obj, "seq", data),
        batch=batch if isinstance(batch, str) else None,
        count=count if type(count) is int else None,
        duplicate=obj.get("duplicate") is True,
        domain=domain if isinstance(domain, str) else None,
    )
