"""CBOR (RFC 8949), as its reference library reads it, with the tags that are data (times, big numbers,
decimal fractions, UUIDs, encoding hints) and every other tag refused: a tag asks the reader to build
what it names (a compiled regular expression, a MIME message, shared references that make cycles, a
set), and a payload does not choose what the console builds. Depth is bounded; trailing bytes refused; a number whose decoding would cost more than its size (a
big number past MAX_NUMBER_BYTES, an exponent past MAX_EXPONENT) stays undecoded, said in its place."""

from __future__ import annotations

import decimal
import io
from typing import Any, Mapping

import cbor2

from console.decoders import MAX_DEPTH, DecodeError, Decoder

# The tags cbor2 builds something for that is not plain data: each refused (tags it does not know go
# to the tag hook, refused there too). Kept: 0/1 times, 2/3 bignums, 4/5 decimals, 21-24 encoding hints,
# 32 URI (text), 37 UUID, 55799 the self-described marker.
NOT_DATA = (25, 28, 29, 30, 35, 36, 100, 256, 258, 260, 261, 262, 263, 264, 265, 1004, 1040)


MAX_NUMBER_BYTES = 512  # of a big number (tags 2 and 3): 1,234 digits; past it, it stays undecoded
MAX_EXPONENT = 10_000  # of a decimal fraction or a bigfloat (tags 4 and 5)


def undecoded(size: int) -> str:
    """What stands for a number too large to decode at a bounded cost (reading a 1,000 KiB bignum as a
    decimal grows with the square of its size): said, in its place, so the message's other fields show."""
    return f"<a number of {size:,} bytes, not decoded: past {MAX_NUMBER_BYTES} bytes>"


def _bignum(negative: bool) -> Any:
    def decode(value: Any, *_: Any) -> Any:
        if not isinstance(value, bytes):
            raise DecodeError("a CBOR big number that is not a byte string")
        if len(value) > MAX_NUMBER_BYTES:
            return undecoded(len(value))
        number = int.from_bytes(value, "big")
        return -1 - number if negative else number

    return decode


def _fraction(base: int) -> Any:
    def decode(value: Any, *_: Any) -> Any:
        if not (isinstance(value, list) and len(value) == 2 and type(value[0]) is int):
            raise DecodeError(f"a CBOR {'decimal fraction' if base == 10 else 'bigfloat'} that is not [exponent, mantissa]")
        exponent, mantissa = value
        if isinstance(mantissa, str):  # a mantissa left undecoded: so is the number
            return mantissa
        if type(mantissa) is not int:
            raise DecodeError("a CBOR decimal fraction whose mantissa is not a number")
        if abs(exponent) > MAX_EXPONENT:
            return f"<a number with exponent {exponent:,}, not decoded: past {MAX_EXPONENT:,}>"
        if base == 10:
            return decimal.Decimal((int(mantissa < 0), tuple(map(int, str(abs(mantissa)))), exponent))
        with decimal.localcontext(decimal.Context(prec=34, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)):
            return decimal.Decimal(mantissa) * decimal.Decimal(2) ** exponent

    return decode


BOUNDED = {2: _bignum(False), 3: _bignum(True), 4: _fraction(10), 5: _fraction(2)}


def _refused(*_: Any) -> Any:
    raise DecodeError("a CBOR tag that is not data")


def _unknown(_: Any, tag: Any) -> Any:
    raise DecodeError(f"CBOR tag {tag.tag}: not data the console reads")


class CborDecoder(Decoder):
    encoding = "cbor"

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        stream = io.BytesIO(data)
        try:
            value = cbor2.CBORDecoder(stream, tag_hook=_unknown, semantic_decoders={**dict.fromkeys(NOT_DATA, _refused), **BOUNDED},
                                      max_depth=MAX_DEPTH).decode()
        except cbor2.CBORDecodeError as e:
            cause = e.__cause__ or e.__context__
            raise DecodeError(cause.reason if isinstance(cause, DecodeError) else f"not CBOR: {str(e)[:200]}") from None
        if stream.tell() != len(data):
            raise DecodeError(f"{len(data) - stream.tell():,} bytes after the CBOR value")
        return value
