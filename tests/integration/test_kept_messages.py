"""A lost batch's first and last messages, kept by a real collector that taps the publish side on a real
server: an abandoned atomic batch of Protobuf orders and a fail-mode fast batch of JSON orders each
leave one BATCH_MESSAGES event beside their loss, masked by the rules before it is written; the
incident built from the event log shows them decoded, as each role may see them; a batch that commits
leaves none."""

from __future__ import annotations

import itertools
import json

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.fast import BatchEndedError, FastBatch
from console.collector.collector import Collector
from console.collector.kept import KeptMessages
from console.config import CollectorSettings
from console.decoders.rules import load_decoders
from console.domain.events import LOST_KINDS, EventKind
from console.domain.incident import build_incident, incident_report
from console.domain.kept_messages import kept_messages
from console.domain.masking import load_masking
from console.domain.roles import FULL, MASKED, NONE
from console.payloads import Payloads
from tests.decoders.orders import as_protobuf, descriptor_set, order, protobuf_class
from tests.waits import events_for

NAMES = itertools.count(1)
RULES = '[[mask]]\nstreams = ["T*"]\nfields = ["customer.address.city", "card.number"]\nheaders = ["X-Customer"]\n'


@pytest.fixture
def decoders_file(tmp_path):
    binpb = descriptor_set(tmp_path)
    path = tmp_path / "decoders.toml"
    path.write_text(f'[[decoder]]\nstreams = ["T*"]\nsubjects = ["*.pb"]\nencoding = "protobuf"\n'
                    f'descriptor_set = "{binpb.name}"\nmessage = "shop.v1.Order"\n')
    return path, binpb


def as_json(i: int) -> bytes:
    return json.dumps({k: v for k, v in order(i).items() if k != "signature"}).encode()


async def _collecting(nc, subject: str, decoders) -> Collector:
    kept = KeptMessages(Payloads(load_masking(RULES), decoders))
    collector = Collector(nc, CollectorSettings(batch_timeout=1.0, tick_every=0.1,
                                                tap_publish_subjects=(f"{subject}.>",)), kept=kept)
    await collector.start()
    return collector


@pytest.fixture
async def own(server):
    """A connection to this module's own server (no other module's collector or batches beside it), and a
    maker of its streams."""
    nc = await nats.connect(server.url)

    async def make_stream(**config) -> tuple[str, str]:
        name = f"TKEPT{next(NAMES)}"  # T*: the masking rules' and the decoders' streams
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], **config))
        return name, name.lower()

    yield nc, make_stream
    await nc.close()


async def test_an_abandoned_atomic_batch_keeps_its_first_and_last_protobuf_orders_masked(own, decoders_file):
    nc, make_stream = own
    path, binpb = decoders_file
    decoders, cls = load_decoders(path), protobuf_class(binpb)
    stream, subject = await make_stream(allow_atomic=True)
    collector = await _collecting(nc, subject, decoders)
    try:
        batch = AtomicBatch(nc)
        for i in (1, 2, 3):
            await batch.add(f"{subject}.pb", as_protobuf(cls, order(i)), headers={"X-Customer": f"c{i}"})
        batch.discard()  # the server abandons it at its batch timeout
        events = await events_for(nc, {batch.batch_id}, lambda es: any(e.kind is EventKind.BATCH_MESSAGES for e in es),
                                  timeout=60)
        [kept] = [e for e in events if e.kind is EventKind.BATCH_MESSAGES]
        written = b"".join(m.data + repr(m.headers).encode() for m in kept_messages(kept))
        assert b"o1" in written and not any(word in written for word in (b"Berlin", b"Lyon", b"4111-", b"'c1'"))
        incident = build_incident(batch.batch_id, events)
        assert incident is not None and incident.loss.kind is EventKind.ATOMIC_ABANDONED
        assert [(m.place, m.seq) for m in incident.messages] == [("first", 1), ("last", 3)]

        first, last = Payloads(load_masking(RULES), decoders, lambda _: MASKED).kept(incident)
        assert first.about.startswith("json")  # masked when kept: JSON from then on
        shown = json.loads(first.text)
        assert shown["id"] == "o1" and shown["status"] == "SHIPPED" and shown["customer"]["id"] == 1
        assert shown["customer"]["address"]["city"] == "***" and shown["card"]["number"] == "***"
        assert dict(first.headers)["X-Customer"] == "***"
        assert json.loads(last.text)["id"] == "o3"
        full = Payloads(load_masking(RULES), decoders, lambda _: FULL).kept(incident)
        assert json.loads(full[0].text)["card"]["number"] == "***"  # what was never kept cannot be shown
        hidden = Payloads(load_masking(RULES), decoders, lambda _: NONE).kept(incident)
        assert all("o1" not in m.text and "o3" not in m.text and "not shown to your role" in m.text for m in hidden)

        report = incident_report(incident, messages=[first, last])
        assert "## The batch's first and last messages" in report and '"id": "o1"' in report
        assert "Berlin" not in report and "4111-" not in report
    finally:
        await collector.stop()


async def test_a_lost_fast_batch_keeps_its_first_and_last_json_orders_and_a_committed_one_none(own):
    nc, make_stream = own
    stream, subject = await make_stream(allow_batched=True)
    collector = await _collecting(nc, subject, None)
    try:
        lost = FastBatch(nc, flow=5, gap_mode="fail")
        try:
            for seq in range(1, 21):
                if seq == 10:
                    lost.skip_seq(2)
                await lost.add(f"{subject}.json", as_json(seq))
            await lost.commit_eob()
        except BatchEndedError:
            pass
        fine = FastBatch(nc, flow=5)
        for seq in range(1, 6):
            await fine.add(f"{subject}.json", as_json(seq))
        await fine.commit_eob()

        events = await events_for(nc, {lost.batch_id, fine.batch_id}, lambda es: (
            any(e.kind is EventKind.BATCH_MESSAGES for e in es)
            and any(e.kind is EventKind.FAST_COMMITTED and e.batch_id == fine.batch_id for e in es)), timeout=60)
        assert [e.batch_id for e in events if e.kind is EventKind.BATCH_MESSAGES] == [lost.batch_id]
        incident = build_incident(lost.batch_id, events)
        assert incident is not None and incident.loss.kind in LOST_KINDS
        first, last = Payloads(load_masking(RULES), None, lambda _: MASKED).kept(incident)
        assert (first.seq, json.loads(first.text)["id"]) == (1, "o1")
        assert last.seq > 10 and json.loads(last.text)["card"]["number"] == "***"
        assert "4111-" not in incident_report(incident, messages=[first, last])
    finally:
        await collector.stop()
