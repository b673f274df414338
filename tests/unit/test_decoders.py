"""Each decoder reads the same logical orders as the encoding's reference library wrote them (a real
protoc's descriptor set, fastavro, msgpack, cbor2): the same fields, enums by name, bytes as bytes,
int64 exact. Hostile payloads (truncated, another schema, nested too deep, huge counts, a CBOR bomb,
tags that are not data) are one DecodeError with its reason, never another error; so is any byte
string at all (hypothesis). The decoders file is strict and refused with its line."""

from __future__ import annotations

import cbor2
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.decoders import MAX_DEPTH, DecodeError, decoder_for
from console.decoders.avro_decoder import AvroDecoder
from console.decoders.protobuf_decoder import ProtobufDecoder
from console.decoders.rules import DecodersError, load_decoders
from tests.decoders.orders import (BIG, HERE, as_avro, as_cbor, as_msgpack, as_protobuf, descriptor_set, order,
                                   protobuf_class)

COMMON = ("id", "amount_cents", "status", "items", "signature", "labels", "customer")


@pytest.fixture(scope="module")
def binpb(tmp_path_factory):
    return descriptor_set(tmp_path_factory.mktemp("proto"))


@pytest.fixture(scope="module")
def decoders(binpb):
    return {"protobuf": ProtobufDecoder(binpb.read_bytes(), "shop.v1.Order"),
            "avro": AvroDecoder((HERE / "order.avsc").read_text()),
            "msgpack": decoder_for("msgpack")(), "cbor": decoder_for("cbor")()}


def encoded(kind: str, o: dict, binpb) -> bytes:
    return {"protobuf": lambda: as_protobuf(protobuf_class(binpb), o), "avro": lambda: as_avro(o),
            "msgpack": lambda: as_msgpack(o), "cbor": lambda: as_cbor(o)}[kind]()


@pytest.mark.parametrize("kind", ["protobuf", "avro", "msgpack", "cbor"])
def test_each_encoding_reads_the_same_order(kind, decoders, binpb):
    for i in (0, 1, 5, 7, 14):
        o = order(i)
        got = decoders[kind].decode(encoded(kind, o, binpb))
        assert {k: got[k] for k in COMMON} == {k: o[k] for k in COMMON}, (kind, i)
    assert decoders[kind].decode(encoded(kind, order(7), binpb))["amount_cents"] == 7000 + BIG  # exact


def test_protobuf_is_read_as_its_library_reads_it(decoders, binpb):
    got = decoders["protobuf"].decode(as_protobuf(protobuf_class(binpb), order(3)))
    assert got["card"] == {"number": "4111-0003"} and "voucher" not in got  # a oneof: the member sent
    assert "note" not in got  # optional, not sent: absent; a proto3 scalar not sent is its default
    empty = decoders["protobuf"].decode(b"")
    assert empty["amount_cents"] == 0 and empty["status"] == "STATUS_UNSPECIFIED" and "customer" not in empty
    unnamed = protobuf_class(binpb)()
    unnamed.ParseFromString(b"\x18\x09")  # status = 9: a number the enum does not name stays a number
    assert decoders["protobuf"].decode(unnamed.SerializeToString())["status"] == 9


def test_avro_single_object_encoding_and_logical_types(decoders):
    got = decoders["avro"].decode(as_avro(order(2), single_object=True))
    assert got["payment"] == {"number": "4111-0002"} and got["placed_at"] == "2026-11-27T10:00:00+00:00"
    assert got["price"] == "20.00"


@pytest.mark.parametrize("kind, payload, said", [
    ("protobuf", b"\x0a\x05ab", "not protobuf"),  # truncated: a string of 5 with 2 bytes
    ("protobuf", b"\x12\x03\x0a\x01", "not protobuf"),
    ("avro", b"\x06o1", "not avro"),  # truncated
    ("avro", b"\xc3\x01" + b"\x00" * 8 + b"\x02", "written with another schema"),
    ("msgpack", msgpack.packb(msgpack.ExtType(1, b"x")), "extension type"),
    ("msgpack", b"\xdd\xff\xff\xff\xff", "not msgpack"),  # an array of 4 billion, in 5 bytes
    ("msgpack", b"\x91" * 10_000, "not msgpack"),
    ("cbor", b"\x9f" * 10_000, "nesting depth"),  # a CBOR bomb: nested indefinite arrays
    ("cbor", cbor2.dumps(cbor2.CBORTag(35, "(a+)+$")), "not data"),  # a regular expression to compile
    ("cbor", bytes.fromhex("d81c81d81d00"), "not data"),  # shared references: a cycle
    ("cbor", cbor2.dumps(cbor2.CBORTag(258, [1, 2])), "not data"),
    ("cbor", cbor2.dumps(cbor2.CBORTag(40000, "x")), "40000"),
    ("cbor", cbor2.dumps(1) + b"x", "after the CBOR value"),
    ("cbor", bytes.fromhex("9bffffffffffffffff"), "not CBOR"),  # a declared length past the payload
])
def test_a_hostile_payload_is_one_decode_error_with_its_reason(kind, payload, said, decoders):
    with pytest.raises(DecodeError) as refused:
        decoders[kind].decode(payload)
    assert said in refused.value.reason


def test_a_recursive_message_nested_past_the_bound_is_refused(binpb):
    node = ProtobufDecoder(binpb.read_bytes(), "shop.v1.Node")

    def nested(depth: int) -> bytes:  # written as the wire has it: the library refuses to build it that deep
        data = b"\x10\x01"  # value = 1
        for _ in range(depth):
            data = b"\x0a" + _varint(len(data)) + data  # child = the message so far
        return data

    assert node.decode(nested(3))["child"]["child"]["child"]["value"] == 1
    with pytest.raises(DecodeError):
        node.decode(nested(MAX_DEPTH + 5))
    with pytest.raises(DecodeError):
        node.decode(nested(5000))  # past the library's own limit too
    huge = msgpack.packb({"a": [list(range(1000)) for _ in range(300)]})  # each list short, 300,000 in all
    with pytest.raises(DecodeError, match="values"):
        decoder_for("msgpack")().decode(huge)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_are_one_decode_error(decoders, data):
    for decoder in decoders.values():
        try:
            decoder.decode(data)
        except DecodeError:
            pass


def _file(tmp_path, text: str):
    path = tmp_path / "decoders.toml"
    path.write_text(text)
    return path


def test_the_decoders_file_picks_a_decoder_by_stream_subject_and_header(tmp_path, binpb):
    (tmp_path / "orders.binpb").write_bytes(binpb.read_bytes())
    (tmp_path / "order.avsc").write_text((HERE / "order.avsc").read_text())
    found = load_decoders(_file(tmp_path, '''
[[decoder]]
streams = ["ORDERS*"]
subjects = ["orders.pb.>"]
encoding = "protobuf"
descriptor_set = "orders.binpb"
message = "shop.v1.Order"

[[decoder]]
streams = ["ORDERS*"]
header = "Content-Type"
value = "application/avro"
encoding = "avro"
schema = "order.avsc"

[[decoder]]
streams = ["MP"]
encoding = "msgpack"
'''))
    assert found.decoder("ORDERS_EU", "orders.pb.eu").describe() == "protobuf shop.v1.Order"
    assert found.decoder("ORDERS_EU", "orders.x", {"content-type": "application/avro"}).describe() == "avro shop.v1.Order"
    assert found.decoder("ORDERS_EU", "orders.x") is None and found.decoder("OTHER", "orders.pb.eu") is None
    assert found.decoder("MP", "anything").encoding == "msgpack"


@pytest.mark.parametrize("text, said", [
    ('[[decoder]]\nstreams = ["A"]\nencoding = "xml"\n', "line 1: encoding"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "json"\ncolour = 1\n', "unknown key 'colour'"),
    ('[[decoder]]\nstreams = "A"\nencoding = "json"\n', "streams"),
    ('[[decoder]]\nstreams = ["A\\u0007"]\nencoding = "json"\n', "streams"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "protobuf"\ndescriptor_set = "x.binpb"\n', "needs message"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "protobuf"\ndescriptor_set = "missing.binpb"\nmessage = "a.B"\n',
     "cannot be read"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "avro"\nschema = "/etc/hostname"\n', "not an Avro schema"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "json"\nschema = "x.avsc"\n', "not json's"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "json"\nheader = "Content-Type"\n', "both or neither"),
    ('[[decoder]]\nstreams = ["A"]\nencoding = "json"\n\n[[decoder]]\nstreams = []\nencoding = "json"\n', "line 5"),
    ('[[decoder]\n', "not TOML"),
    ('[decoder]\nstreams = ["A"]\n', "[[decoder]] tables"),
    ('x = 1\n', "unknown table or key"),
])
def test_a_decoders_file_with_an_error_is_refused_with_its_line(tmp_path, text, said):
    with pytest.raises(DecodersError) as refused:
        load_decoders(_file(tmp_path, text))
    assert said in str(refused.value), str(refused.value)


def test_a_descriptor_set_without_the_message_or_not_one_is_refused(tmp_path, binpb):
    (tmp_path / "orders.binpb").write_bytes(binpb.read_bytes())
    (tmp_path / "junk.binpb").write_bytes(b"\xff" * 100)
    for name, message, said in (("orders.binpb", "shop.v1.Nope", "no message"), ("junk.binpb", "a.B", "descriptor set")):
        with pytest.raises(DecodersError, match=said):
            load_decoders(_file(tmp_path, f'[[decoder]]\nstreams = ["A"]\nencoding = "protobuf"\n'
                                          f'descriptor_set = "{name}"\nmessage = "{message}"\n'))


def test_arrow_types_follow_the_schema_and_a_value_that_does_not_fit_is_never_an_error(binpb):
    import pyarrow as pa

    from console.decoders.arrow import conform

    node = ProtobufDecoder(binpb.read_bytes(), "shop.v1.Node").arrow_type()
    assert node.field("value").type == pa.int32() and node.field("child").type == pa.string()  # recursive: text
    order_type = ProtobufDecoder(binpb.read_bytes(), "shop.v1.Order").arrow_type()
    assert order_type.field("labels").type == pa.map_(pa.string(), pa.string())
    assert conform(9, pa.string()) == "9"  # an enum number the schema does not name: text
    assert conform(2 ** 40, pa.int32()) is None and conform(True, pa.int64()) is None
    assert conform({"a": b"\x00"}, pa.string()) == '{"a": {"base64": "AA=="}}'
    assert conform("x", pa.struct([("a", pa.int64())])) is None
    avro = AvroDecoder((HERE / "order.avsc").read_text()).arrow_type()
    assert avro.field("payment").type == pa.string()  # a union of two records: JSON text
    assert avro.field("placed_at").type == pa.string()  # a logical type: its canonical text
