"""A message written to cost its reader: a CBOR decimal fraction whose mantissa is a 1,000 KiB big number
(reading it as a decimal grows with the square of its size), a big number past the 4,300 digits Python
turns into text, an Avro message of 6 bytes declaring 100,000,000 null items, an Avro decimal of 400 KB.
Each is read at a bounded cost, said for what it is, and never stops the others: a search over their
stream with masking rules finds every other message, and so does its export."""

from __future__ import annotations

import asyncio
import json
import subprocess

import cbor2
import nats
import pytest
from nats.js.api import StreamConfig

from console.decoders import DecodeError
from console.decoders.avro_decoder import AvroDecoder
from console.decoders.cbor_decoder import CborDecoder
from tests.decoders.orders import zigzag
from tests.processes import CLI

GOOD = 20
NULLS_SCHEMA = {"type": "record", "name": "Nulls", "fields": [
    {"name": "id", "type": "long"}, {"name": "gaps", "type": {"type": "array", "items": "null"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}


def avro(i: int, nulls: int = 2, price: bytes = b"\x04\xd2") -> bytes:
    return zigzag(i) + (zigzag(nulls) + zigzag(0) if nulls else zigzag(0)) + zigzag(len(price)) + price


HOSTILE_CBOR = {"decimal of a 1,000 KiB big number": cbor2.dumps({"id": 901, "v": cbor2.CBORTag(4, [-2, (1 << (8 * 1_000 * 1024)) - 1])}),
                "a big number past 4,300 digits": cbor2.dumps({"id": 902, "v": cbor2.CBORTag(2, b"\xff" * 3000)}),
                "an exponent of a billion": cbor2.dumps({"id": 903, "v": cbor2.CBORTag(5, [10 ** 9, 3])})}
HOSTILE_AVRO = {"100,000,000 null items": avro(904, nulls=100_000_000),
                "a decimal of 400 KB": avro(905, price=b"\x01" * 400_000)}


def test_each_hostile_cbor_number_stays_undecoded_and_the_message_reads():
    for why, data in HOSTILE_CBOR.items():
        value = CborDecoder().decode(data)
        assert value["id"] in (901, 902, 903) and "not decoded" in value["v"], why


def test_each_hostile_avro_message_is_refused_with_its_reason():
    decoder = AvroDecoder(json.dumps(NULLS_SCHEMA))
    assert decoder.decode(avro(1)) == {"id": 1, "gaps": [None, None], "price": "12.34"}
    for why, data in HOSTILE_AVRO.items():
        with pytest.raises(DecodeError) as refused:
            decoder.decode(data)
        assert "more than 200,000 values" in refused.value.reason or "past what its precision needs" in refused.value.reason, why


@pytest.fixture(scope="module")
def hostile_streams(server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "nulls.avsc").write_text(json.dumps(NULLS_SCHEMA))
    (tmp / "decoders.toml").write_text('[[decoder]]\nstreams = ["HOST_CBOR"]\nencoding = "cbor"\n\n'
                                       '[[decoder]]\nstreams = ["HOST_AVRO"]\nencoding = "avro"\nschema = "nulls.avsc"\n')
    (tmp / "mask.toml").write_text('[[mask]]\nstreams = ["HOST_*"]\nfields = ["secret"]\n')

    async def fill() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        for stream in ("HOST_CBOR", "HOST_AVRO"):
            await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"], max_msg_size=2 << 20))
        for i in range(1, GOOD + 1):
            await js.publish("host_cbor.x", cbor2.dumps({"id": i, "secret": f"s-{i}"}))
            await js.publish("host_avro.x", avro(i))
            if i == GOOD // 2:  # the hostile ones among the good
                for data in HOSTILE_CBOR.values():
                    await js.publish("host_cbor.x", data)
                for data in HOSTILE_AVRO.values():
                    await js.publish("host_avro.x", data)
        await nc.close()

    asyncio.run(fill())
    return server.url, tmp


@pytest.mark.parametrize("stream, hostile", [("HOST_CBOR", len(HOSTILE_CBOR)), ("HOST_AVRO", len(HOSTILE_AVRO))])
@pytest.mark.parametrize("export", [False, True])
def test_a_masked_search_and_its_export_find_every_message_past_the_hostile_ones(hostile_streams, stream, hostile,
                                                                                 export, tmp_path):
    url, tmp = hostile_streams
    out = tmp_path / "out.jsonl"
    done = subprocess.run([CLI, "search", stream, "--server", url, "--data-dir", str(tmp), "--decoders",
                           str(tmp / "decoders.toml"), "--mask-rules", str(tmp / "mask.toml"), "--where",
                           "payload.id > 0", "--max-seconds", "20", "--max-matches", "1000",
                           *(["--output", str(out), "--format", "jsonl"] if export else [])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (out.read_text().splitlines()[1:] if export else done.stdout.splitlines())]
    ids = sorted(json.loads(r["payload"])["id"] if isinstance(r["payload"], str) else r["payload"]["id"] for r in rows)
    if stream == "HOST_CBOR":  # the numbers are said undecoded in place: the messages match on their id
        assert ids == [*range(1, GOOD + 1), 901, 902, 903], ids
        assert "s-1" not in json.dumps(rows)  # masked
    else:  # refused whole, each with its reason
        assert ids == list(range(1, GOOD + 1)) and f", {hostile} not evaluable" in done.stderr, done.stderr[-1000:]
