"""The operator's decoders file (`--decoders FILE`, BATCH_CONSOLE_DECODERS): which decoder reads which
messages. Strict TOML, refused with its line on any error; a schema or descriptor set is a file beside
it (a path relative to it, or absolute), read once, never fetched from anywhere else:

    [[decoder]]
    streams = ["ORDERS*"]              # globs of stream names
    subjects = ["orders.>"]            # optional: NATS subject filters
    header = "Content-Type"            # optional, with value: only messages with this header's value
    value = "application/x-protobuf"
    encoding = "protobuf"              # json, text, protobuf, avro, msgpack, cbor
    descriptor_set = "orders.binpb"    # protobuf: a compiled FileDescriptorSet, and the message's full name
    message = "shop.v1.Order"
    # avro: schema = "order.avsc"

The first table that takes a message decides; a message no table takes is read as before (JSON when it
is JSON, else its bytes)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from console.decoders import DecodeError, Decoder, decoder_for
from console.domain.masking import MASKED_AS
from console.domain.toml_text import FileRefused, read_toml, with_lines
from console.domain.subjects import subject_matches

MAX_TABLES = 200
MAX_FILE = 16 << 20  # a descriptor set or a schema read at most
KEYS = {"streams", "subjects", "header", "value", "encoding", "descriptor_set", "message", "schema"}


class DecodersError(FileRefused):
    pass


@dataclass(frozen=True)
class DecoderRule:
    streams: tuple[str, ...]
    subjects: tuple[str, ...]
    header: str | None
    value: str | None
    decoder: Decoder
    line: int | None = None

    def takes(self, stream: str, subject: str, headers: Mapping[str, str]) -> bool:
        if not any(fnmatch.fnmatchcase(stream, glob) for glob in self.streams):
            return False
        if self.subjects and not any(subject_matches(f, subject) for f in self.subjects):
            return False
        if self.header is not None:
            found = next((v for k, v in headers.items() if k.lower() == self.header.lower()), None)
            return found == self.value
        return True


@dataclass(frozen=True)
class Decoders:
    rules: tuple[DecoderRule, ...] = ()
    source: str = ""  # the file, as the stream page names it
    _by_stream: dict[str, tuple[DecoderRule, ...]] = field(default_factory=dict, compare=False, repr=False)

    def for_stream(self, stream: str) -> tuple[DecoderRule, ...]:
        """The rules that may take this stream's messages (found once a stream)."""
        if stream not in self._by_stream:
            if len(self._by_stream) > 10_000:
                self._by_stream.clear()
            self._by_stream[stream] = tuple(r for r in self.rules
                                            if any(fnmatch.fnmatchcase(stream, g) for g in r.streams))
        return self._by_stream[stream]

    def decoder(self, stream: str, subject: str, headers: Mapping[str, str] | None = None) -> Decoder | None:
        return next((r.decoder for r in self.for_stream(stream) if r.takes(stream, subject, headers or {})), None)


def load_decoders(path: Path) -> Decoders:
    """The file's rules, each decoder built (its files read); DecodersError with the line on any error."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DecodersError(f"{path}: cannot be read ({type(e).__name__})") from None
    data = read_toml(text, DecodersError)
    if unknown := set(data) - {"decoder"}:
        raise DecodersError(f"unknown table or key: {sorted(unknown)[0][:60]!r} (only [[decoder]])")
    tables = data.get("decoder", [])
    if not isinstance(tables, list) or len(tables) > MAX_TABLES:
        raise DecodersError(f"[[decoder]] tables, at most {MAX_TABLES}")
    rules = [_rule(table, line, path.parent) for table, line in with_lines(text, "decoder", tables)]
    return Decoders(tuple(rules), str(path))


def _rule(table: Any, line: int | None, beside: Path) -> DecoderRule:
    if not isinstance(table, dict):
        raise DecodersError("a [[decoder]] table", line)
    if extra := set(table) - KEYS:
        raise DecodersError(f"unknown key {sorted(extra)[0][:60]!r} ({', '.join(sorted(KEYS))})", line)
    streams, subjects = _strings(table.get("streams"), "streams", line), _strings(table.get("subjects", []),
                                                                                 "subjects", line)
    if not streams:
        raise DecodersError("streams: at least one stream or glob", line)
    header, value = table.get("header"), table.get("value")
    if (header is None) != (value is None) or any(x is not None and not _printable(x, 256) for x in (header, value)):
        raise DecodersError("header and value: both or neither, printable text", line)
    encoding = table.get("encoding")
    if not isinstance(encoding, str):
        raise DecodersError("encoding: one of " + ", ".join(sorted(_encodings())), line)
    try:
        kind = decoder_for(encoding)
    except DecodeError as e:
        raise DecodersError(f"encoding: {e.reason}", line) from None
    for key in kind.needs:
        if not _printable(table.get(key), 1024):
            raise DecodersError(f"{encoding} needs {key}", line)
    if stray := {"descriptor_set", "message", "schema"} & set(table) - set(kind.needs):
        raise DecodersError(f"{sorted(stray)[0]} is not {encoding}'s", line)
    try:
        decoder = kind.from_table(table, lambda name: _file(name, beside, line))
    except DecodeError as e:
        raise DecodersError(e.reason, line) from None
    return DecoderRule(streams, subjects, header, value, decoder, line)


def _file(name: str, beside: Path, line: int | None) -> bytes:
    path = (beside / name) if not Path(name).is_absolute() else Path(name)
    try:
        if path.stat().st_size > MAX_FILE:
            raise DecodersError(f"{name}: past {MAX_FILE:,} bytes", line)
        return path.read_bytes()
    except OSError as e:
        raise DecodersError(f"{name}: cannot be read ({type(e).__name__})", line) from None


def _strings(value: object, key: str, line: int | None) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > 100 or not all(_printable(v, 255) for v in value):
        raise DecodersError(f"{key}: a list of at most 100 printable strings", line)
    return tuple(v for v in value if isinstance(v, str))


def _printable(value: object, most: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= most and value.isprintable()


def _encodings() -> set[str]:
    decoder_for("json")
    return set(Decoder.registry)


def decoded_as(decoders: Decoders | None, stream: str, subject: str, headers: Mapping[str, str] | None) -> Decoder | None:
    """The decoder of a message as a search's worker sees it: a message the console decoded and masked
    already (its own header, set after any of the publisher's was removed) is JSON now."""
    if headers and MASKED_AS in headers:
        return decoder_for("json")()
    return decoders.decoder(stream, subject, headers) if decoders is not None else None


def pick(decoders: Decoders | None) -> Callable[[str, str, dict[str, str]], Callable[[bytes], Any] | None] | None:
    """The masking's view of the decoders: (stream, subject, headers) -> a decode function, or None."""
    if decoders is None:
        return None

    def decoder_of(stream: str, subject: str, headers: dict[str, str]) -> Callable[[bytes], Any] | None:
        found = decoders.decoder(stream, subject, headers)
        return found.decode if found is not None else None

    return decoder_of


@dataclass(frozen=True)
class Decoded:
    """A message as a page shows it: what read it, and its value or why it did not decode."""

    decoder: str  # "protobuf shop.v1.Order"
    value: Any = None
    error: str | None = None


def decode_message(decoders: Decoders | None, stream: str, subject: str, headers: Mapping[str, str],
                   data: bytes) -> Decoded | None:
    """The message decoded by its stream's decoder (None: it has none); a DecodeError is the reason."""
    decoder = decoded_as(decoders, stream, subject, headers)
    if decoder is None:
        return None
    try:
        return Decoded(decoder.describe(), decoder.decode(data, headers))
    except DecodeError as e:
        return Decoded(decoder.describe(), error=e.reason)


def described(decoders: Decoders | None, stream: str) -> list[str]:
    """What reads a stream's messages, as its page says it: each table that may, with its conditions."""
    if decoders is None:
        return []
    said = []
    for rule in decoders.for_stream(stream):
        where = [f"subjects {', '.join(rule.subjects)}"] if rule.subjects else []
        where += [f"{rule.header}: {rule.value}"] if rule.header else []
        said.append(rule.decoder.describe() + (f" ({'; '.join(where)})" if where else "") +
                    (f" — {Path(decoders.source).name} line {rule.line}" if rule.line else ""))
    return said


def one_decoder(decoders: Decoders | None, stream: str) -> Decoder | None:
    """The decoder of every message of a stream, when one table takes them all (no subject or header
    condition): a typed export's columns are its schema's."""
    rules = decoders.for_stream(stream) if decoders is not None else ()
    if len(rules) == 1 and not rules[0].subjects and rules[0].header is None:
        return rules[0].decoder
    return None
