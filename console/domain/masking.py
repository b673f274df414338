"""Payload masking: rules per stream that hide JSON fields and header values wherever a payload is
shown or given out (Search, Replay, the CLI, notebooks), read strictly from a TOML file like the alert
rules (a file with an error is refused whole, with its line), and the switch that turns payloads off.

    [[mask]]
    streams = ["ORDERS*"]                  # globs
    fields = ["customer.email", "card.*", "items[*].price"]   # JSON paths: . between keys, * any key,
                                                              # [*] every item of a list
    headers = ["Authorization", "X-Customer-Id"]              # names, case-insensitive

A stream with a decoder (console/decoders/) is masked on its decoded message, field paths as for JSON,
and given out as that masked message in JSON (marked with the header MASKED_AS). A field rule on a
payload that neither is JSON nor decodes masks the whole payload: what cannot be read for a field
cannot be shown safely.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from console.domain.roles import FULL, MASKED, NONE
from console.domain.toml_text import FileRefused, read_toml, with_lines

MASK = "***"
KEYS = {"streams", "fields", "headers"}
MAX_RULES, MAX_PATHS, MAX_PATH = 200, 100, 200
_PATH = re.compile(r"^(\*|[A-Za-z0-9_\-]{1,64})(\[\*\])?(\.(\*|[A-Za-z0-9_\-]{1,64})(\[\*\])?){0,15}$")


class MaskRulesError(FileRefused):
    """A masking rules file the console refuses."""


@dataclass(frozen=True)
class MaskRule:
    streams: tuple[str, ...]
    fields: tuple[tuple[str, ...], ...]  # each path as its steps: "a", "*", "a[*]"
    headers: frozenset[str]  # lowercased

    def applies(self, stream: str) -> bool:
        return any(fnmatch.fnmatchcase(stream, glob) for glob in self.streams)


Headers = tuple[tuple[str, str], ...]
Shown = Callable[..., tuple[Headers, bytes]]  # (headers, data, subject="") -> what may be shown of them
# (stream, subject, headers) -> the decoder of such a message (bytes -> plain values, raising on what does
# not decode), or None: read as JSON
DecoderPick = Callable[[str, str, dict[str, str]], Callable[[bytes], Any] | None]
MASKED_AS = "Batch-Console-Decoded"  # set on a message the console decoded and masked: JSON from then on


@dataclass(frozen=True)
class Masking:
    rules: tuple[MaskRule, ...] = ()
    payloads: bool = True  # False: no payload is shown or given out at all

    def for_stream(self, stream: str) -> tuple[frozenset[str], tuple[tuple[str, ...], ...]]:
        headers: set[str] = set()
        fields: list[tuple[str, ...]] = []
        for rule in self.rules:
            if rule.applies(stream):
                headers |= rule.headers
                fields += rule.fields
        return frozenset(headers), tuple(fields)

    def shown(self, stream: str, level: str = MASKED, decoders: DecoderPick | None = None) -> Shown | None:
        """What may be shown of one stream's messages, bound once for the stream (a search applies it
        to every message): None when it is the message itself. `level` is what the user's roles let
        them see of this stream's payloads (console.domain.roles): full as stored, masked by the rules,
        or none; `--no-payloads` turns payloads off for everyone."""
        masked_headers, fields = self.for_stream(stream) if level != FULL else (frozenset(), ())
        if level == NONE or not self.payloads:
            why = "payloads are off" if not self.payloads else "not shown to your role"
            return lambda headers, data, subject="": (_headers(headers, masked_headers),
                                                      f"({why}: {len(data)} bytes)".encode())
        if not fields and not masked_headers:
            return None

        def apply(headers: Headers, data: bytes, subject: str = "") -> tuple[Headers, bytes]:
            headers = tuple((k, v) for k, v in headers if k != MASKED_AS)  # the console's own mark, never a publisher's
            if not fields or not data:
                return _headers(headers, masked_headers), data
            decode = decoders(stream, subject, dict(headers)) if decoders is not None else None
            try:
                document = decode(data) if decode is not None else json.loads(data)
            except Exception:  # not JSON, or not its decoder's: no field can be found in it
                return _headers(headers, masked_headers), MASK.encode()
            for path in fields:
                document = _mask(document, path)
            mark = ((MASKED_AS, "json"),) if decode is not None else ()
            try:
                body = json.dumps(document, ensure_ascii=False, default=_as_json).encode()
            except (ValueError, TypeError, RecursionError):  # a number past int's text limit, a value JSON has not:
                return _headers(headers, masked_headers), MASK.encode()  # masked whole, the others go on
            return _headers(headers, masked_headers) + mark, body

        return apply

    def apply(self, stream: str, headers: Headers, data: bytes, level: str = MASKED, subject: str = "",
              decoders: DecoderPick | None = None) -> tuple[Headers, bytes]:
        """One message as it may be shown (see shown)."""
        shown = self.shown(stream, level, decoders)
        return (headers, data) if shown is None else shown(headers, data, subject)


def _as_json(value: Any) -> Any:
    """A decoded message's bytes in JSON: their base64, marked."""
    if isinstance(value, bytes):
        import base64

        return {"base64": base64.b64encode(value).decode()}
    raise TypeError(type(value).__name__)


def _headers(headers: Headers, masked: frozenset[str]) -> Headers:
    return tuple((k, MASK if k.lower() in masked else v) for k, v in headers) if masked else headers


def _mask(node: Any, path: tuple[str, ...]) -> Any:
    if not path:
        return MASK
    step, rest = path[0], path[1:]
    every = step.endswith("[*]")
    key = step[:-3] if every else step

    def inner(value: Any) -> Any:
        if every:
            return [_mask(item, rest) for item in value] if isinstance(value, list) else value
        return _mask(value, rest)

    if isinstance(node, dict):
        return {k: (inner(v) if key == "*" or k == key else v) for k, v in node.items()}
    return node


def load_masking(text: str, payloads: bool = True) -> Masking:
    """The rules of a file, or MaskRulesError with its line."""
    data = read_toml(text, MaskRulesError)
    unknown = set(data) - {"mask"}
    if unknown:
        raise MaskRulesError(f"unknown table or key: {', '.join(sorted(unknown))[:100]} (only [[mask]])")
    tables = data.get("mask", [])
    if not isinstance(tables, list) or len(tables) > MAX_RULES:
        raise MaskRulesError(f"[[mask]] tables, at most {MAX_RULES}")
    rules = []
    for table, line in with_lines(text, "mask", tables):
        if extra := set(table) - KEYS:
            raise MaskRulesError(f"unknown key {sorted(extra)[0]!r} (streams, fields, headers)", line)
        streams, fields, headers = (_strings(table.get(k, []), k, line) for k in ("streams", "fields", "headers"))
        if not streams:
            raise MaskRulesError("streams: at least one stream or glob", line)
        if not fields and not headers:
            raise MaskRulesError("a rule masks fields, headers or both", line)
        for path in fields:
            if len(path) > MAX_PATH or not _PATH.match(path):
                raise MaskRulesError(f"not a JSON path: {path[:60]!r} (a.b, a.*, items[*].price)", line)
        rules.append(MaskRule(streams, tuple(tuple(p.split(".")) for p in fields),
                              frozenset(h.lower() for h in headers)))
    return Masking(tuple(rules), payloads)


def _strings(value: object, key: str, line: int | None) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_PATHS or not all(
            isinstance(v, str) and 0 < len(v) <= MAX_PATH and v.isprintable() for v in value):
        raise MaskRulesError(f"{key} must be a list of at most {MAX_PATHS} printable strings", line)
    return tuple(value)
