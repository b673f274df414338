"""Protobuf, from a compiled descriptor set (`protoc --include_imports --descriptor_set_out`, or
`buf build -o`) and a message's full name, read by the reference library. A message is its fields as
the library reads them: a field without presence (a proto3 scalar) is there with its value, its default
when not sent; one with presence (a message, `optional`, a oneof's member) only when sent. Enums by
name (a number the schema does not name stays a number), bytes as bytes, 64-bit numbers exact, maps as
maps. The library bounds the nesting it parses; the plain values are bounded again."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from console.decoders import MAX_DEPTH, DecodeError, Decoder


class ProtobufDecoder(Decoder):
    encoding = "protobuf"
    needs = ("descriptor_set", "message")

    @classmethod
    def from_table(cls, table: Mapping[str, str], read: Callable[[str], bytes]) -> Decoder:
        return cls(read(table["descriptor_set"]), table["message"])

    def __init__(self, descriptor_set: bytes, message: str):
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        try:
            files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
            pool = descriptor_pool.DescriptorPool()
            for file in files.file:  # protoc --include_imports writes each file after those it imports
                pool.Add(file)
            descriptor = pool.FindMessageTypeByName(message)
        except KeyError:
            raise DecodeError(f"no message {message[:100]!r} in the descriptor set") from None
        except Exception as e:
            raise DecodeError(f"not a descriptor set the library reads: {type(e).__name__}: {str(e)[:200]}") from None
        self.message = message
        self.cls = message_factory.GetMessageClass(descriptor)
        self._trees: dict[tuple[tuple[str, ...], ...], dict[str, Any]] = {}  # a search's paths, as a tree

    def describe(self) -> str:
        return f"protobuf {self.message}"

    def arrow_type(self) -> Any:
        from console.decoders.arrow import protobuf_type

        return protobuf_type(self.cls.DESCRIPTOR)

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        return _message(self.cls.FromString(data), 0)

    def _decode_paths(self, data: bytes, headers: Mapping[str, str], paths: tuple[tuple[str, ...], ...] | None) -> Any:
        message = self.cls.FromString(data)
        if paths is None:
            return _message(message, 0)
        tree = self._trees.get(paths)
        if tree is None:
            tree = self._trees[paths] = _tree(paths)
        return _some(message, tree, 0)

def _tree(paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """Paths as a tree of field names; None where a field is read whole."""
    tree: dict[str, Any] = {}
    for path in sorted(paths, key=len):
        node = tree
        for i, name in enumerate(path):
            if name in node and node[name] is None:
                break
            if i == len(path) - 1:
                node[name] = None
            else:
                node = node.setdefault(name, {})
    return tree


def _message(message: Any, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise DecodeError(f"nested past {MAX_DEPTH} levels")
    sent = {field.name for field, _ in message.ListFields()}
    return {field.name: _field(message, field, depth) for field in message.DESCRIPTOR.fields
            if not (field.has_presence and field.name not in sent)}


def _some(message: Any, tree: dict[str, Any], depth: int) -> dict[str, Any]:
    """Only the fields of `tree` of a message, each as _message reads it: a search reads a few fields of
    a large message, and building the rest cost three times the read itself."""
    if depth > MAX_DEPTH:
        raise DecodeError(f"nested past {MAX_DEPTH} levels")
    out: dict[str, Any] = {}
    fields = message.DESCRIPTOR.fields_by_name
    for name, below in tree.items():
        field = fields.get(name)
        if field is None or (field.has_presence and not message.HasField(name)):
            continue
        if below is not None and field.message_type is not None and not field.is_repeated:
            out[name] = _some(getattr(message, name), below, depth + 1)
        else:
            out[name] = _field(message, field, depth)
    return out


def _field(message: Any, field: Any, depth: int) -> Any:
    value = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {str(k).lower() if isinstance(k, bool) else str(k): _value(value_field, v, depth)
                for k, v in value.items()}
    if field.is_repeated:
        return [_value(field, v, depth) for v in value]
    return _value(field, value, depth)


def _value(field: Any, value: Any, depth: int) -> Any:
    if field.message_type is not None:
        return _message(value, depth + 1)
    if field.enum_type is not None:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    return value
