"""The same logical orders in each encoding the console decodes, for the decoders' tests: Protobuf
(tests/decoders/order.proto, compiled by a real protoc), Avro (order.avsc, fastavro), MessagePack, CBOR."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
STATUSES = ("PLACED", "SHIPPED")
BIG = 2 ** 40  # past 32 bits: an int64 read exactly or not at all


def order(i: int) -> dict[str, Any]:
    """Order i, as plain values: what every decoder is to give (Protobuf and Avro add their own fields)."""
    return {"id": f"o{i}", "amount_cents": i * 1000 + (BIG if i % 7 == 0 else 0), "status": STATUSES[i % 2],
            "items": [{"sku": f"sku-{j}", "qty": j + 1} for j in range(i % 3 + 1)],
            "signature": bytes([i % 256, 0, 255]), "labels": {"team": "a" if i % 2 else "b"},
            "customer": {"id": 4711 if i % 5 == 0 else i, "address": {"city": "Berlin" if i % 3 else "Lyon"}},
            "card": {"number": f"4111-{i:04d}"}}


def descriptor_set(tmp: Path) -> Path:
    """order.proto compiled by protoc (grpcio-tools), with its imports: what `protoc --descriptor_set_out` writes."""
    out = tmp / "orders.binpb"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "--include_imports", f"--descriptor_set_out={out}",
                    f"-I{HERE}", str(HERE / "order.proto")], check=True, capture_output=True, timeout=60)
    return out


def protobuf_class(binpb: Path, name: str = "shop.v1.Order") -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(binpb.read_bytes()).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def as_protobuf(cls: Any, o: dict[str, Any]) -> bytes:
    m = cls(id=o["id"], amount_cents=o["amount_cents"], status=o["status"], signature=o["signature"])
    for item in o["items"]:
        m.items.add(sku=item["sku"], qty=item["qty"])
    m.card.number = o["card"]["number"]
    m.labels.update(o["labels"])
    m.customer.id = o["customer"]["id"]
    m.customer.address.city = o["customer"]["address"]["city"]
    return m.SerializeToString()


def avro_schema() -> Any:
    import fastavro

    return fastavro.parse_schema(json.loads((HERE / "order.avsc").read_text()))


def as_avro(o: dict[str, Any], single_object: bool = False) -> bytes:
    import fastavro
    from fastavro.schema import to_parsing_canonical_form

    from console.decoders.avro_decoder import fingerprint

    schema = avro_schema()
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, {**{k: v for k, v in o.items() if k != "card"}, "payment": o["card"],
                                             "placed_at": datetime(2026, 11, 27, 10, 0, tzinfo=timezone.utc),
                                             "price": Decimal(o["amount_cents"] % 100_000) / 100})
    body = out.getvalue()
    return b"\xc3\x01" + fingerprint(to_parsing_canonical_form(schema)) + body if single_object else body


def as_msgpack(o: dict[str, Any]) -> bytes:
    import msgpack

    return msgpack.packb(o, use_bin_type=True)


def as_cbor(o: dict[str, Any]) -> bytes:
    import cbor2

    return cbor2.dumps(o)


def zigzag(n: int) -> bytes:
    """An Avro long as the binary encoding writes it (zig-zag, then variable length): for data written by hand."""
    n, out = (n << 1) ^ (n >> 63), b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])
