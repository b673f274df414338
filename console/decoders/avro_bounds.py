"""What an Avro datum would cost to read, told before fastavro reads it. A block's item count is the
writer's word, and an item of some types takes no byte at all (null, a record with no field, a fixed of
size 0): a 6-byte message declaring 100,000,000 null items made fastavro build a list of as many. And a
decimal's bytes are as long as the writer likes: reading a long one costs the square of its length. So
where a schema has either (`needs_walk`), the datum is walked first, counting values and refusing past
the bounds, at a cost that grows with its values, never more."""

from __future__ import annotations

import math
from typing import Any

from console.decoders import MAX_DEPTH, MAX_VALUES, DecodeError

PRIMITIVE_SIZES = {"boolean": 1, "float": 4, "double": 8}


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str):
        return named.get(schema, schema)
    return schema


def _decimal_most(schema: dict[str, Any]) -> int:
    """Bytes a decimal of this precision needs at most (its two's complement), with one to spare."""
    precision = schema.get("precision")
    digits = precision if type(precision) is int and 0 < precision <= 10_000 else 38
    return math.ceil(digits * math.log2(10) / 8) + 2


def needs_walk(schema: Any) -> bool:
    """Whether a datum of this schema can declare more values than its bytes, or a decimal of any length."""
    named: dict[str, Any] = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    seen: set[int] = set()

    def zero_size(s: Any, depth: int = 0) -> bool:
        s = _resolve(s, named)
        if depth > MAX_DEPTH or s == "null":
            return True
        if isinstance(s, dict):
            kind = s.get("type")
            if kind == "record":
                return all(zero_size(f.get("type"), depth + 1) for f in s.get("fields", []))
            if kind == "fixed":
                return s.get("size") == 0
            if isinstance(kind, (dict, list)) or kind == "null":
                return zero_size(kind, depth + 1)
        return False

    def walk(s: Any, depth: int = 0) -> bool:
        if isinstance(s, str):
            if s not in named or id(named[s]) in seen:
                return False
            s = named[s]
        if depth > MAX_DEPTH:
            return True
        if isinstance(s, list):
            return any(walk(branch, depth + 1) for branch in s)
        if not isinstance(s, dict):
            return False
        seen.add(id(s))
        kind = s.get("type")
        if s.get("logicalType") == "decimal" and kind == "bytes":
            return True
        if kind == "array":
            return zero_size(s.get("items"), depth + 1) or walk(s.get("items"), depth + 1)
        if kind == "map":
            return walk(s.get("values"), depth + 1)  # each entry has a key: at least a byte
        if kind == "record":
            return any(walk(f.get("type"), depth + 1) for f in s.get("fields", []))
        return walk(kind, depth + 1) if isinstance(kind, (dict, list, str)) and kind not in PRIMITIVE_SIZES else False

    return walk(schema)


class _Reader:
    def __init__(self, data: bytes, named: dict[str, Any]):
        self.data, self.pos, self.named, self.values = data, 0, named, 0

    def long(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise DecodeError("not avro: the datum ends within a number")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise DecodeError("not avro: a number longer than 10 bytes")

    def skip(self, size: int) -> None:
        if size < 0 or self.pos + size > len(self.data):
            raise DecodeError("not avro: a length past the datum's end")
        self.pos += size

    def count(self, n: int = 1) -> None:
        self.values += n
        if self.values > MAX_VALUES:
            raise DecodeError(f"more than {MAX_VALUES:,} values")

    def datum(self, schema: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise DecodeError(f"nested past {MAX_DEPTH} levels")
        schema = _resolve(schema, self.named)
        self.count()
        if isinstance(schema, list):
            index = self.long()
            if not 0 <= index < len(schema):
                raise DecodeError(f"not avro: union branch {index} of {len(schema)}")
            self.datum(schema[index], depth + 1)
            return
        if isinstance(schema, dict):
            kind = schema.get("type")
            if kind == "record":
                for field in schema.get("fields", []):
                    self.datum(field.get("type"), depth + 1)
            elif kind == "array":
                self._blocks(lambda: self.datum(schema.get("items"), depth + 1))
            elif kind == "map":
                self._blocks(lambda: self._entry(schema.get("values"), depth + 1))
            elif kind == "fixed":
                self.skip(int(schema.get("size", 0)))
            elif kind == "enum":
                self.long()
            elif kind == "bytes" and schema.get("logicalType") == "decimal":
                size = self.long()
                if size > _decimal_most(schema):
                    raise DecodeError(f"a decimal of {size:,} bytes, past what its precision needs")
                self.skip(size)
            else:
                self.datum(kind, depth + 1)
            return
        if schema in ("null",):
            return
        if schema in PRIMITIVE_SIZES:
            self.skip(PRIMITIVE_SIZES[schema])
        elif schema in ("int", "long"):
            self.long()
        elif schema in ("bytes", "string"):
            self.skip(self.long())
        else:
            raise DecodeError(f"not avro: a type the schema does not name: {str(schema)[:40]}")

    def _entry(self, values: Any, depth: int) -> None:
        self.skip(self.long())  # the key
        self.datum(values, depth)

    def _blocks(self, item: Any) -> None:
        while (n := self.long()) != 0:
            if n < 0:
                n = -n
                self.long()  # the block's size in bytes
            self.count(n)  # the count first: a block of a billion empty items is refused before it is walked
            for _ in range(n):
                item()


def walk(data: bytes, schema: Any) -> None:
    """DecodeError when reading this datum would build more than MAX_VALUES values or a decimal longer than
    its precision needs; else nothing."""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    _Reader(data, named).datum(schema, 0)
