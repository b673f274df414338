"""Avro, from the operator's schema file (.avsc), read by fastavro: a message is plain binary, or the
single-object encoding (C3 01, the schema's CRC-64-AVRO fingerprint, then binary), whose fingerprint
must be this schema's. Unions as their branch's value, logical types as fastavro gives them (times,
dates, decimals, UUIDs: then as their canonical text). Bytes after the datum are refused."""

from __future__ import annotations

import io
import json
from typing import Any, Callable, Mapping

from console.decoders import DecodeError, Decoder

SINGLE_OBJECT = b"\xc3\x01"
_EMPTY = 0xC15D213AA4D7A795  # the Avro specification's CRC-64 seed


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _crc64_table()


def fingerprint(canonical: str) -> bytes:
    """The schema's Rabin fingerprint (CRC-64-AVRO) as the single-object encoding writes it: little-endian."""
    fp = _EMPTY
    for byte in canonical.encode():
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")


class AvroDecoder(Decoder):
    encoding = "avro"
    needs = ("schema",)

    @classmethod
    def from_table(cls, table: Mapping[str, str], read: Callable[[str], bytes]) -> Decoder:
        return cls(read(table["schema"]).decode("utf-8", "replace"))

    def __init__(self, schema_text: str):
        import fastavro
        from fastavro.schema import to_parsing_canonical_form

        try:
            self.schema = fastavro.parse_schema(json.loads(schema_text))
            self.fingerprint = fingerprint(to_parsing_canonical_form(self.schema))
        except Exception as e:
            raise DecodeError(f"not an Avro schema: {type(e).__name__}: {str(e)[:200]}") from None
        self.name = self.schema.get("name", self.schema.get("type")) if isinstance(self.schema, dict) else "schema"
        from console.decoders.avro_bounds import needs_walk

        self.walk_first = needs_walk(self.schema)  # items of no size, or decimals: their cost told first

    def describe(self) -> str:
        return f"avro {self.name}"

    def arrow_type(self) -> Any:
        from console.decoders.arrow import avro_type

        return avro_type(self.schema)

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        from fastavro import schemaless_reader

        if data[:2] == SINGLE_OBJECT:
            if data[2:10] != self.fingerprint:
                raise DecodeError(f"written with another schema (fingerprint {data[2:10].hex()}, this one's "
                                  f"{self.fingerprint.hex()})")
            data = data[10:]
        if self.walk_first:
            from console.decoders.avro_bounds import walk

            walk(data, self.schema)
        body = io.BytesIO(data)
        value = schemaless_reader(body, self.schema)
        if body.tell() != len(data):
            raise DecodeError(f"{len(data) - body.tell():,} bytes after the Avro datum")
        return value
