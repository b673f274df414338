"""CBOR (RFC 8949), as its reference library reads it, with the tags that are data (times, big numbers,
decimal fractions, UUIDs, encoding hints) and every other tag refused: a tag asks the reader to build
what it names (a compiled regular expression, a MIME message, shared references that make cycles, a
set), and a payload does not choose what the console builds. Depth is bounded; trailing bytes refused."""

from __future__ import annotations

import io
from typing import Any, Mapping

import cbor2

from console.decoders import MAX_DEPTH, DecodeError, Decoder

# The tags cbor2 builds something for that is not plain data: each refused (tags it does not know go
# to the tag hook, refused there too). Kept: 0/1 times, 2/3 bignums, 4/5 decimals, 21-24 encoding hints,
# 32 URI (text), 37 UUID, 55799 the self-described marker.
NOT_DATA = (25, 28, 29, 30, 35, 36, 100, 256, 258, 260, 261, 262, 263, 264, 265, 1004, 1040)


def _refused(*_: Any) -> Any:
    raise DecodeError("a CBOR tag that is not data")


def _unknown(_: Any, tag: Any) -> Any:
    raise DecodeError(f"CBOR tag {tag.tag}: not data the console reads")


class CborDecoder(Decoder):
    encoding = "cbor"

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        stream = io.BytesIO(data)
        try:
            value = cbor2.CBORDecoder(stream, tag_hook=_unknown, semantic_decoders=dict.fromkeys(NOT_DATA, _refused),
                                      max_depth=MAX_DEPTH).decode()
        except cbor2.CBORDecodeError as e:
            cause = e.__cause__ or e.__context__
            raise DecodeError(cause.reason if isinstance(cause, DecodeError) else f"not CBOR: {str(e)[:200]}") from None
        if stream.tell() != len(data):
            raise DecodeError(f"{len(data) - stream.tell():,} bytes after the CBOR value")
        return value
