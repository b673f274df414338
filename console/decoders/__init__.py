"""Payload decoders, one class each (a new encoding is one file here): JSON, text, Protobuf, Avro,
MessagePack and CBOR. A decoder turns a message's bytes into plain values (dicts, lists, text, bytes,
whole numbers exactly, floats, booleans, None) that a search's `payload`, the masking rules and the
exports read as they read JSON. Decoding is bounded (size, depth, number of values) and total: any
input that is not a message of its encoding is one DecodeError with its reason, never another error.
Which decoder a stream's messages use is the operator's decoders file (console/decoders/rules.py)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any, Callable, ClassVar, Mapping

MAX_BYTES = 4 << 20  # a payload decoded at most (NATS' own limit is 1 MiB by default, 64 MiB at most)
MAX_DEPTH = 64  # nested messages, maps and lists
MAX_VALUES = 200_000  # values in one decoded message


class DecodeError(Exception):
    """A payload that does not decode: the reason, said beside the raw bytes and counted."""

    def __init__(self, reason: str):
        super().__init__(reason[:300])
        self.reason = reason[:300]


class Decoder:
    """Bytes (and the message's headers) to plain values; DecodeError for anything else."""

    encoding: ClassVar[str]  # what the decoders file calls it
    registry: ClassVar[dict[str, type[Decoder]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Decoder.registry[cls.encoding] = cls

    def decode(self, data: bytes, headers: Mapping[str, str] | None = None,
               paths: tuple[tuple[str, ...], ...] | None = None) -> Any:
        """The message as plain values; `paths`: only these fields (and all below them), as a search's
        expression reads them (None: all of it)."""
        if len(data) > MAX_BYTES:
            raise DecodeError(f"{len(data):,} bytes: past the {MAX_BYTES:,} a payload is decoded at most")
        try:
            return plain(self._decode_paths(data, headers or {}, paths))
        except DecodeError:
            raise
        except RecursionError:
            raise DecodeError(f"nested past {MAX_DEPTH} levels") from None
        except Exception as e:  # a library's own error for input that is not its encoding: one reason
            raise DecodeError(f"not {self.encoding}: {type(e).__name__}: {str(e)[:200]}") from None

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        raise NotImplementedError

    def _decode_paths(self, data: bytes, headers: Mapping[str, str], paths: tuple[tuple[str, ...], ...] | None) -> Any:
        value = self._decode(data, headers)
        return value if paths is None else prune(value, paths)

    # The decoders file's keys this encoding needs, and its decoder from them (`read` reads a file the
    # file names, beside it): most take none.
    needs: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_table(cls, table: Mapping[str, str], read: Callable[[str], bytes]) -> Decoder:
        return cls()

    def describe(self) -> str:
        """What the stream page says of it."""
        return self.encoding

    def arrow_type(self) -> Any:
        """The decoded message's Arrow type, where a schema says it (a typed Parquet export); else None."""
        return None


def plain(value: Any) -> Any:
    """The decoded value as plain values, bounded in depth and count (DecodeError past them). Times, dates,
    decimals and UUIDs (Avro's logical types, CBOR's tags for them) are their canonical text."""
    count = 0

    def walk(v: Any, depth: int) -> Any:
        nonlocal count
        count += 1
        if count > MAX_VALUES:
            raise DecodeError(f"more than {MAX_VALUES:,} values")
        if depth > MAX_DEPTH:
            raise DecodeError(f"nested past {MAX_DEPTH} levels")
        kind = type(v)
        if kind in _PLAIN:  # the common case first: an ABC's isinstance was a search's largest cost
            return v
        if kind is dict:
            return {k if type(k) is str else _key(k): walk(item, depth + 1) for k, item in v.items()}
        if kind is list:
            return [walk(item, depth + 1) for item in v]
        if v is None or isinstance(v, (bool, int, float, str, bytes)):
            return v
        if isinstance(v, (bytearray, memoryview)):
            return bytes(v)
        if isinstance(v, Mapping):
            return {_key(k): walk(item, depth + 1) for k, item in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(item, depth + 1) for item in v]
        if isinstance(v, (dt.datetime, dt.date, dt.time)):
            return v.isoformat()
        if isinstance(v, (decimal.Decimal, uuid.UUID)):
            return str(v)
        raise DecodeError(f"a value that is not data: {type(v).__name__}")

    return walk(value, 0)


def prune(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
    """Only the fields at `paths` (shortest first: a whole subtree is taken whole) of a decoded map."""
    if not isinstance(value, Mapping):
        return value
    out: dict[Any, Any] = {}
    for path in sorted(paths, key=len):
        src: Any = value
        dst = out
        for i, key in enumerate(path):
            if not isinstance(src, Mapping) or key not in src or (key in dst and dst[key] is src[key]):
                break
            if i == len(path) - 1 or not isinstance(src[key], Mapping):
                dst[key] = src[key]
                break
            dst = dst.setdefault(key, {})
            src = src[key]
    return out


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def _key(key: Any) -> str:
    """A map's key as text (MessagePack and CBOR maps may have numbers or bytes as keys)."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bool, int, float)) or key is None:
        return str(key).lower() if isinstance(key, bool) or key is None else str(key)
    if isinstance(key, bytes):
        return key.hex()
    raise DecodeError(f"a map key that is not a plain value: {type(key).__name__}")


KINDS = ("json_text", "protobuf_decoder", "avro_decoder", "msgpack_decoder", "cbor_decoder")  # a new one: its module


def decoder_for(encoding: str) -> type[Decoder]:
    import importlib

    for module in KINDS:
        importlib.import_module(f"console.decoders.{module}")
    try:
        return Decoder.registry[encoding]
    except KeyError:
        raise DecodeError(f"no decoder {encoding[:40]!r}: {', '.join(sorted(Decoder.registry))}") from None
