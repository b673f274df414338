"""Reading hostile bytes: one error type for anything malformed, and the checks every parser shares.

Any client of an account can publish on advisory subjects, on `$FI` reply subjects and on the
event log's own subjects, so every parser of outside input is total: it returns a value or raises
MalformedInput, whatever the bytes (deep nesting, huge numbers, wrong types, invalid UTF-8,
oversized bodies). Numbers are bounded by what the protocol allows and what every sink stores
(int64 in SQLite, Spark and pandas); times by what pandas can hold.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import orjson

MAX_BODY = 64 * 1024  # bytes: the server's replies and advisories are a few hundred
INT64_MAX = 2**63 - 1
MAX_STREAM_NAME_BYTES = 255  # the server refuses longer names (10052)
MAX_BATCH_ID = 64  # both kinds of batch (10179, 10207)
MAX_TEXT = 1024  # descriptions, reasons
MAX_LABEL = 256  # account, domain and consumer names, advisory types
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2262, 1, 1, tzinfo=timezone.utc)  # pandas' nanosecond timestamps end in 2262


class MalformedInput(ValueError):
    """Input that is not what it claims to be; `reason` says why, for counting by reason."""

    what = "input"

    def __init__(self, reason: str, shown: str | None = None):
        super().__init__(reason)
        self.reason, self.shown = reason, shown

    def __str__(self) -> str:  # said when asked: a flood's every refusal is made, few are ever shown
        return f"malformed {self.what} ({self.reason})" + (f": {self.shown!r}" if self.shown else "")


_JSON = json.JSONDecoder()
_BIG_NUMBER = re.compile(rb"\d{19}")  # 19 digits or more: past what orjson keeps an integer


def load_object(data: bytes | str, error: type[MalformedInput] = MalformedInput,
                max_bytes: int = MAX_BODY) -> dict[str, Any]:
    """A JSON object from at most max_bytes; `error` for anything else (never RecursionError & co).
    Read as the standard library reads it, at orjson's speed (5x, on the bodies every tap reads): what
    orjson refuses or reads otherwise (NaN, 1e400, a lone surrogate; a whole number past 64 bits, which it
    makes a float) is read again by the standard library."""
    if len(data) > max_bytes:
        raise error(f"larger than {max_bytes} bytes")
    if _BIG_NUMBER.search(data if isinstance(data, bytes) else data.encode(errors="surrogatepass")):
        obj = _standard(data, error)
    else:
        try:
            obj = orjson.loads(data)
        except (ValueError, TypeError):  # orjson's JSONDecodeError is a ValueError
            obj = _standard(data, error)
    if not isinstance(obj, dict):
        raise error("not a JSON object")
    return obj


def _standard(data: bytes | str, error: type[MalformedInput]) -> Any:
    try:  # UTF-8 as the server writes it (json.loads would guess among UTF-8, 16 and 32 for each body)
        return _JSON.decode(data.decode() if isinstance(data, bytes) else data)
    except RecursionError:
        raise error("nested too deeply") from None
    except (ValueError, TypeError):  # bad JSON, invalid UTF-8, a number of more than 4300 digits
        raise error("not JSON") from None


def bounded_int(value: object, key: str, low: int = 0, high: int = INT64_MAX,
                error: type[MalformedInput] = MalformedInput) -> int:
    if type(value) is not int or not low <= value <= high:
        raise error(_not_an_integer(key, low, high))
    return value


@functools.lru_cache(maxsize=256)
def _not_an_integer(key: str, low: int, high: int) -> str:  # made once: a flood of wrong numbers asks it for each
    return f"{key!r} is not an integer in {low}..{high}"


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME_BREAKERS = re.compile(r"[\x00-\x20\x7f.*>/\\]")  # also white space, which the server refuses


def has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def printable(text: str, limit: int | None = None) -> str:
    """The text with each character that is not printable (a control, a line break) shown as '?', cut at `limit`."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def bounded_text(value: object, key: str, max_len: int = MAX_TEXT,
                 error: type[MalformedInput] = MalformedInput) -> str:
    """A non-empty string of at most max_len characters without control characters."""
    if not isinstance(value, str) or not value or len(value) > max_len or has_control(value):
        raise error(f"{key!r} is not a string of 1..{max_len} printable characters")
    return value


def label(obj: dict[str, Any], key: str) -> str | None:
    """An optional name that only labels (account, domain, consumer): kept when sane, else dropped."""
    value = obj.get(key)
    return value if isinstance(value, str) and 0 < len(value) <= MAX_LABEL and not has_control(value) else None


def stream_name_problem(name: object) -> str | None:
    """Why the server would refuse this stream name, or None: it is also a valid subject token."""
    if not isinstance(name, str) or not name:
        return "stream name is empty or not a string"
    if len(name.encode("utf-8", "replace")) > MAX_STREAM_NAME_BYTES:
        return f"stream name is longer than {MAX_STREAM_NAME_BYTES} bytes"
    if _NAME_BREAKERS.search(name) is not None:
        return "stream name holds white space, a control character or one of . * > / \\"
    return None


def consumer_name_problem(name: object) -> str | None:
    """Why the server would refuse this consumer name, or None (it is a subject token too)."""
    if not isinstance(name, str) or not name:
        return "consumer name is empty or not a string"
    if len(name) > MAX_LABEL:
        return f"consumer name is longer than {MAX_LABEL} characters"
    if _NAME_BREAKERS.search(name) is not None:
        return "consumer name holds white space, a control character or one of . * > / \\"
    return None


def stream_name(value: object, key: str = "stream", error: type[MalformedInput] = MalformedInput) -> str:
    if (problem := stream_name_problem(value)) is not None:
        raise error(f"{key!r}: {problem}")
    return value  # type: ignore[return-value]  # a str: the problem check refuses anything else


def batch_id(value: object, key: str = "batch", error: type[MalformedInput] = MalformedInput) -> str:
    """An atomic batch id travels in a header: 1..64 characters, none of them a control character."""
    return bounded_text(value, key, MAX_BATCH_ID, error)


def bounded_time(value: datetime, error: type[MalformedInput] = MalformedInput) -> datetime:
    """An aware time that every sink can hold, in UTC."""
    if value.tzinfo is None:
        raise error("time has no time zone")
    try:
        utc = value.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise error("time out of range") from None
    if not EARLIEST <= utc < LATEST:
        raise error(f"time {utc:%Y-%m-%d} is outside {EARLIEST:%Y}..{LATEST:%Y}")
    return utc


class Tally(Counter[str]):
    """Counts by reason where reasons come from the wire: past max_keys, new reasons count as "other"."""

    def __init__(self, max_keys: int = 50):
        super().__init__()
        self.max_keys = max_keys

    def add(self, key: str, n: int = 1) -> None:
        if key not in self and len(self) >= self.max_keys:
            key = "other"
        self[key] += n
