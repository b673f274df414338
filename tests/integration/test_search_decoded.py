"""Search over payloads as their publishers wrote them, on a real server: four streams of the same 300
orders, in Protobuf (a real protoc's descriptor set), Avro (single-object and plain), MessagePack and
CBOR, read through a decoders file. `batch-console search --decoders FILE` matches exactly the
messages a plain decode-and-scan keeps, on enums by name, int64 and bytes; a message that does not
decode is counted with its reason and the search goes on; a decoders file with an error stops the
command with its line."""

from __future__ import annotations

import asyncio
import json
import subprocess

import nats
import pytest
from nats.js.api import StreamConfig

from tests.decoders.orders import (BIG, HERE, as_avro, as_cbor, as_msgpack, as_protobuf, descriptor_set, order,
                                   protobuf_class)
from tests.processes import CLI

N = 300
STREAMS = {"ORD_PB": "protobuf", "ORD_AVRO": "avro", "ORD_MP": "msgpack", "ORD_CBOR": "cbor"}
WHERE = [
    ('payload.customer.id == 4711 && payload.status == "SHIPPED"',
     lambda o: o["customer"]["id"] == 4711 and o["status"] == "SHIPPED"),
    (f"payload.amount_cents > {BIG}", lambda o: o["amount_cents"] > BIG),
    ('payload.signature == b"\\x03\\x00\\xff"', lambda o: o["signature"] == b"\x03\x00\xff"),
    ('payload.items.exists(i, i.qty == 3) && payload.customer.address.city == "Berlin"',
     lambda o: any(i["qty"] == 3 for i in o["items"]) and o["customer"]["address"]["city"] == "Berlin"),
]


@pytest.fixture(scope="module")
def decoded(nats_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decoded")
    binpb = descriptor_set(tmp)
    (tmp / "order.avsc").write_text((HERE / "order.avsc").read_text())
    (tmp / "decoders.toml").write_text(f'''
[[decoder]]
streams = ["ORD_PB"]
encoding = "protobuf"
descriptor_set = "{binpb.name}"
message = "shop.v1.Order"

[[decoder]]
streams = ["ORD_AVRO"]
encoding = "avro"
schema = "order.avsc"

[[decoder]]
streams = ["ORD_MP"]
encoding = "msgpack"

[[decoder]]
streams = ["ORD_CBOR"]
encoding = "cbor"
''')
    cls = protobuf_class(binpb)
    encode = {"ORD_PB": lambda o: as_protobuf(cls, o), "ORD_AVRO": lambda o: as_avro(o, single_object=True),
              "ORD_MP": as_msgpack, "ORD_CBOR": as_cbor}

    async def fill() -> None:
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        for stream in STREAMS:
            await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"]))
            for i in range(1, N + 1):
                await nc.publish(f"{stream.lower()}.x", encode[stream](order(i)))
            await nc.publish(f"{stream.lower()}.x", b"\x0a\xff truncated, or not this encoding")  # message N + 1
        await nc.flush()
        for stream in STREAMS:
            while (await js.stream_info(stream)).state.messages < N + 1:
                await asyncio.sleep(0.05)
        await nc.close()

    asyncio.run(fill())
    return nats_server.url, tmp


def search(url: str, tmp, stream: str, where: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "search", stream, "--server", url, "--data-dir", str(tmp), "--decoders",
                           str(tmp / "decoders.toml"), "--where", where, "--max-matches", "1000", *more],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("where, keep", WHERE, ids=[w[0][:40] for w in WHERE])
def test_a_search_matches_what_a_plain_decode_and_scan_keeps(decoded, stream, where, keep):
    url, tmp = decoded
    done = search(url, tmp, stream, where)
    assert done.returncode == 0, done.stderr
    found = [json.loads(line)["seq"] for line in done.stdout.splitlines()]
    expected = [i for i in range(1, N + 1) if keep(order(i))]
    assert expected and found == expected, (stream, where)
    assert ", 1 not evaluable" in done.stderr and f"not evaluated: seq {N + 1}: not decoded: " in done.stderr, \
        done.stderr[-500:]  # message N + 1: counted with its reason, and the search went on past it


def test_a_search_without_the_decoders_says_why_a_payload_predicate_is_not_evaluable(decoded):
    """Beside `up --decoders FILE` a search read no decoder and said a CEL type error ("mixing int with uint")
    that sent the operator the wrong way: it says now that no decoder reads the stream."""
    url, tmp = decoded
    done = subprocess.run([CLI, "search", "ORD_PB", "--server", url, "--data-dir", str(tmp), "--where",
                           "payload.customer.id == 4711", "--max-matches", "10"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout == "", done.stderr[-500:]
    assert "no decoder reads this stream" in done.stderr and "--decoders" in done.stderr, done.stderr[-800:]


def test_a_decoders_file_with_an_error_stops_the_search_with_its_line(decoded):
    url, tmp = decoded
    bad = tmp / "bad.toml"
    bad.write_text('[[decoder]]\nstreams = ["ORD_PB"]\nencoding = "protobuf"\ndescriptor_set = "nope.binpb"\n'
                   'message = "shop.v1.Order"\n')
    done = subprocess.run([CLI, "search", "ORD_PB", "--server", url, "--data-dir", str(tmp), "--decoders", str(bad),
                           "--where", "true"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "line 1" in done.stderr and "nope.binpb" in done.stderr
    assert "Traceback" not in done.stderr


def test_masking_hides_a_decoded_field_and_the_predicate_cannot_see_it(decoded, nats_server):
    url, tmp = decoded
    mask = tmp / "mask.toml"
    mask.write_text('[[mask]]\nstreams = ["ORD_*"]\nfields = ["card.number", "payment.number"]\n')

    async def forge() -> None:  # a publisher's own "decoded" mark, on JSON holding a card number
        nc = await nats.connect(url)
        await nc.publish("ord_mp.x", b'{"card": {"number": "4111-9999"}}', headers={"Batch-Console-Decoded": "json"})
        await nc.flush()
        await nc.close()

    asyncio.run(forge())
    for stream in STREAMS:
        done = search(url, tmp, stream, "payload.customer.id == 4711 || true", "--mask-rules", str(mask))
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        assert len(rows) >= N and "4111-" not in done.stdout + done.stderr, stream
        first = json.loads(rows[0]["payload"])
        assert (first.get("card") or first.get("payment")) == {"number": "***"}, first
        assert first["customer"]["id"] == order(1)["customer"]["id"]  # the rest as decoded
        assert rows[0]["headers"] == {"Batch-Console-Decoded": "json"}
        blind = search(url, tmp, stream, 'payload.card.number == "4111-0005"', "--mask-rules", str(mask))
        assert blind.returncode == 0 and blind.stdout == "", stream  # it sees only what may be shown


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_writes_each_message_decoded_and_masked(decoded, fmt):
    url, tmp = decoded
    mask = tmp / "mask-export.toml"
    mask.write_text('[[mask]]\nstreams = ["ORD_AVRO"]\nfields = ["payment.number"]\n')
    for stream in ("ORD_PB", "ORD_AVRO"):
        out = tmp / f"{stream}.{fmt}"
        done = search(url, tmp, stream, "payload.customer.id == 4711", "--output", str(out), "--format", fmt,
                      "--mask-rules", str(mask))
        assert done.returncode == 0, done.stderr
        text = out.read_text()
        if fmt == "jsonl":
            rows = [json.loads(line) for line in text.splitlines()[1:]]
        else:
            import csv
            import io

            rows = list(csv.DictReader(io.StringIO("\n".join(text.splitlines()[1:]))))
        expected = [i for i in range(1, N + 1) if order(i)["customer"]["id"] == 4711]
        assert [int(r["seq"]) for r in rows] == expected
        payload = json.loads(rows[0]["payload"])
        assert payload["customer"]["id"] == 4711 and payload["status"] == order(expected[0])["status"]
        if stream == "ORD_PB":
            assert rows[0]["encoding"] == "protobuf shop.v1.Order" and payload["card"]["number"].startswith("4111-")
        else:  # masked: given out as the masked message in JSON
            assert rows[0]["encoding"] == "json" and "4111-" not in text


def test_a_notebook_gets_each_match_as_a_decoded_dict(decoded):
    from console.config import event_key
    from console.decoders import DecodeError
    from console.widgets import NotebookConsole

    url, tmp = decoded
    event_key(data_dir=tmp)  # a notebook follows the event log, as a collector keys it

    async def use():
        console = await NotebookConsole.connect(url, data_dir=tmp, decoders=tmp / "decoders.toml")
        try:
            found, _ = await console.search("ORD_AVRO", where="payload.customer.id == 4711", max_matches=3)
            dicts = [console.decoded("ORD_AVRO", f) for f in found]
            last, _ = await console.search("ORD_AVRO", start_seq=N + 1, end_seq=N + 1)
            with pytest.raises(DecodeError):
                console.decoded("ORD_AVRO", last[0])  # the hostile message: its reason, not a dict
            return dicts
        finally:
            await console.close()

    dicts = asyncio.run(use())
    assert [d["customer"]["id"] for d in dicts] == [4711] * 3
    assert dicts[0]["placed_at"] == "2026-11-27T10:00:00+00:00" and isinstance(dicts[0]["signature"], bytes)


@pytest.mark.parametrize("stream", ["ORD_PB", "ORD_AVRO"])
def test_a_parquet_export_has_the_schemas_typed_columns(decoded, stream):
    import pyarrow as pa
    import pyarrow.parquet as pq

    url, tmp = decoded
    out, mask = tmp / f"{stream}.parquet", tmp / "mask-parquet.toml"
    mask.write_text('[[mask]]\nstreams = ["ORD_PB"]\nfields = ["card.number"]\n')
    done = search(url, tmp, stream, "", "--output", str(out), "--format", "parquet", "--mask-rules", str(mask))
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out)
    payload = table.schema.field("payload").type
    assert payload.field("amount_cents").type == pa.int64() and payload.field("status").type == pa.string()
    assert payload.field("signature").type == pa.binary()
    assert payload.field("items").type == pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32())]))
    rows = table.to_pylist()
    assert [r["seq"] for r in rows[:N]] == list(range(1, N + 1))
    assert rows[6]["payload"]["amount_cents"] == order(7)["amount_cents"]  # int64 exact, past 32 bits
    assert rows[0]["payload"]["customer"]["address"]["city"] == "Berlin"
    assert rows[0]["payload"]["signature"] == order(1)["signature"] or stream == "ORD_PB"  # masked: JSON, then text
    hostile = next(r for r in rows if r["seq"] == N + 1)
    raw = b"***" if stream == "ORD_PB" else b"\x0a\xff"  # masked: no field can be found in it, so all of it
    assert hostile["payload"] is None and hostile["raw"].startswith(raw) and "not decoded" in hostile["encoding"]
    assert b"4111-" not in out.read_bytes() or stream == "ORD_AVRO"  # the masked stream's card numbers: gone
