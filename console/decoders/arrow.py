"""Arrow types for decoded messages, as their schema says (a Protobuf descriptor, an Avro schema): a
search's Parquet export has typed columns for them. A message that refers to itself becomes JSON text
where it recurs; a value that does not fit its column (an enum number the schema does not name, a
union's other branch) is JSON text in a text column, or null: never an export that fails."""

from __future__ import annotations

import json
from typing import Any

TEXT = "text"  # a column of JSON text, where the schema gives no one type


def protobuf_type(descriptor: Any, seen: frozenset[str] = frozenset()) -> Any:
    import pyarrow as pa  # pyarrow ships no type information (pyproject.toml's mypy overrides)
    from google.protobuf.descriptor import FieldDescriptor as F

    if descriptor.full_name in seen:
        return pa.string()  # recursive: JSON text from here down
    seen = seen | {descriptor.full_name}
    scalars = {F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(), F.TYPE_INT64: pa.int64(),
               F.TYPE_UINT64: pa.uint64(), F.TYPE_INT32: pa.int32(), F.TYPE_FIXED64: pa.uint64(),
               F.TYPE_FIXED32: pa.uint32(), F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(),
               F.TYPE_BYTES: pa.binary(), F.TYPE_UINT32: pa.uint32(), F.TYPE_ENUM: pa.string(),
               F.TYPE_SFIXED32: pa.int32(), F.TYPE_SFIXED64: pa.int64(), F.TYPE_SINT32: pa.int32(),
               F.TYPE_SINT64: pa.int64()}
    fields = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value = field.message_type.fields_by_name["value"]
            kind = pa.map_(pa.string(), _protobuf_field(value, scalars, seen))
        else:
            kind = _protobuf_field(field, scalars, seen)
            if field.is_repeated:
                kind = pa.list_(kind)
        fields.append(pa.field(field.name, kind))
    return pa.struct(fields)


def _protobuf_field(field: Any, scalars: dict[int, Any], seen: frozenset[str]) -> Any:
    if field.message_type is not None:
        return protobuf_type(field.message_type, seen)
    return scalars[field.type]


def avro_type(schema: Any, seen: frozenset[str] = frozenset()) -> Any:
    import pyarrow as pa

    if isinstance(schema, str):
        simple = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                  "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
        return simple.get(schema, pa.string())  # a named type referred to again: recursive, JSON text
    if isinstance(schema, list):  # a union: its one non-null branch, else JSON text
        branches = [b for b in schema if b != "null"]
        return avro_type(branches[0], seen) if len(branches) == 1 else pa.string()
    if not isinstance(schema, dict):
        return pa.string()
    kind = schema.get("type")
    if schema.get("logicalType"):  # times, dates, decimals, UUIDs: their canonical text (console.decoders.plain)
        return pa.string()
    if kind == "record":
        name = schema.get("name", "")
        if name in seen:
            return pa.string()
        return pa.struct([pa.field(f["name"], avro_type(f["type"], seen | {name})) for f in schema.get("fields", [])])
    if kind == "enum":
        return pa.string()
    if kind == "array":
        return pa.list_(avro_type(schema.get("items"), seen))
    if kind == "map":
        return pa.map_(pa.string(), avro_type(schema.get("values"), seen))
    if kind == "fixed":
        return pa.binary()
    return avro_type(kind, seen)


def conform(value: Any, kind: Any) -> Any:
    """A decoded value as the column takes it: lists, structs and maps within, text as JSON where the
    column is text and the value is not, None where it cannot fit."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_struct(kind):
        if not isinstance(value, dict):
            return None
        return {f.name: conform(value.get(f.name), f.type) for f in kind}
    if pa.types.is_list(kind):
        return [conform(v, kind.value_type) for v in value] if isinstance(value, list) else None
    if pa.types.is_map(kind):
        return [(str(k), conform(v, kind.item_type)) for k, v in value.items()] if isinstance(value, dict) else None
    if pa.types.is_string(kind):
        return value if isinstance(value, str) else json.dumps(value, default=_base64, ensure_ascii=False)
    if pa.types.is_binary(kind):
        return value if isinstance(value, bytes) else None
    if pa.types.is_boolean(kind):
        return value if isinstance(value, bool) else None
    if pa.types.is_integer(kind):
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        bits = kind.bit_width
        low, high = (0, 2 ** bits - 1) if pa.types.is_unsigned_integer(kind) else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
        return value if low <= value <= high else None
    if pa.types.is_floating(kind):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return None


def _base64(value: Any) -> Any:
    import base64

    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    raise TypeError(type(value).__name__)
