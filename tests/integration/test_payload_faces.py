"""One payload pipeline, every face: a role that sees the PF_* streams' payloads masked reads a JSON
stream and a Protobuf stream (a decoder applies) of one real server, through each face that shows or
gives out a payload: the Replay and Incident pages, a notebook, the API (a search job, its export, an
incident; MCP's tools are these calls), the command line's search, and the collector that keeps a lost
batch's messages. Every one shows the card number and the Authorization header masked and the Protobuf
message decoded; none shows the secret. A page that shows payloads cannot be made without the pipeline."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest
from nats.js.api import StreamConfig

from console import pages
from console.api.app import make_api
from console.api.tokens import TokenStore
from console.broker.atomic import AtomicBatch
from console.collector.collector import Collector
from console.collector.kept import KeptMessages
from console.config import CollectorSettings, load
from console.domain.audit import NOTEBOOK, Actor
from console.fleet import Fleet
from console.queries.reads import SystemReads
from console.queries.sight import Sight
from console.runtime import Runtime
from console.ui.replay import ReplayPage
from console.widgets import NotebookConsole
from tests.decoders.orders import as_protobuf, descriptor_set, order, protobuf_class
from tests.processes import CLI
from tests.waits import eventually

ROLES = ('[[role]]\nname = "support"\nactions = ["search.run", "export.*", "message.*", "consumer.fetch"]\n'
         'masked_payloads = ["PF_*"]\n')
MASK = '[[mask]]\nstreams = ["PF_*"]\nfields = ["card.number"]\nheaders = ["Authorization"]\n'
SECRET_HEADER = "Bearer SECRET-TOKEN"
SECRETS = ("4111-", "SECRET-TOKEN")


def secret_free(text: str | bytes) -> bool:
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    return not any(s in text for s in SECRETS)


@pytest.fixture
async def faces(server, tmp_path):
    binpb = descriptor_set(tmp_path)
    (tmp_path / "decoders.toml").write_text(f'[[decoder]]\nstreams = ["PF_PB"]\nencoding = "protobuf"\n'
                                            f'descriptor_set = "{binpb.name}"\nmessage = "shop.v1.Order"\n')
    (tmp_path / "roles.toml").write_text(ROLES)
    (tmp_path / "mask.toml").write_text(MASK)
    env = {"BATCH_CONSOLE_SERVER": server.url, "BATCH_CONSOLE_DATA_DIR": str(tmp_path),
           "BATCH_CONSOLE_ROLES": str(tmp_path / "roles.toml"), "BATCH_CONSOLE_MASK_RULES": str(tmp_path / "mask.toml"),
           "BATCH_CONSOLE_DECODERS": str(tmp_path / "decoders.toml"), "BATCH_CONSOLE_LOCAL_ROLE": "support"}
    settings = load(environ=env)
    settings.keyed_event_log(make=True)
    async with await Runtime.open(settings, writes_events=True) as runtime:
        js, cls = runtime.nc.jetstream(), protobuf_class(binpb)
        await js.add_stream(StreamConfig(name="PF_JSON", subjects=["pfjson.>"]))
        await js.add_stream(StreamConfig(name="PF_PB", subjects=["pfpb.>"], allow_atomic=True))
        for i in (1, 2):
            await js.publish("pfjson.x", json.dumps({k: v for k, v in order(i).items() if k != "signature"}).encode(),
                             headers={"Authorization": SECRET_HEADER})
            await js.publish("pfpb.x", as_protobuf(cls, order(i)), headers={"Authorization": SECRET_HEADER})
        collector = Collector(runtime.nc, CollectorSettings(batch_timeout=1.0, tick_every=0.1,
                                                            tap_publish_subjects=("pfpb.>",)),
                              runtime.event_log, kept=KeptMessages(runtime.payloads()))
        await collector.start()
        runtime.live  # following the event log from now on, as a page's runtime does
        lost = AtomicBatch(runtime.nc)
        for i in (3, 4):
            await lost.add("pfpb.lost", as_protobuf(cls, order(i)), headers={"Authorization": SECRET_HEADER})
        lost.discard()  # the server abandons it at its batch timeout; the collector keeps its two, masked

        async def kept():
            found = await SystemReads(runtime, Sight(runtime.actions(NOTEBOOK).grants)).incident(lost.batch_id)
            return found if found is not None and found.messages else None

        incident = await eventually(kept, lambda found: found is not None, 60, "the lost batch's kept messages")
        try:
            yield runtime, env, incident
        finally:
            await collector.stop()


def decoded_and_masked(document: dict, i: int) -> None:
    assert document["id"] == f"o{i}" and document["status"] in ("PLACED", "SHIPPED")
    assert document["card"]["number"] == "***"


async def test_every_face_shows_payloads_masked_and_decoded_through_one_pipeline(faces):
    runtime, env, incident = faces
    actions = runtime.actions(Actor("support-user"))
    assert actions.payloads("PF_PB") == "masked"

    # the collector's face: what it kept of the lost batch was masked before the event log had it
    assert incident.messages and all(secret_free(m.data + repr(m.headers).encode()) for m in incident.messages)

    # pages: Replay decodes the masked Protobuf message; the Incident page's kept messages and report
    replay = pages.replay(runtime, actions, stream="PF_PB", max_messages=10)
    await replay.reload()
    replay.stream = "PF_PB"
    fetched = await replay.fetch()
    assert fetched is not None and len(fetched.messages) == 2  # the abandoned batch stored none
    cards = "".join(card.objects[0].object for card in replay._messages.objects)
    assert "not decoded" not in cards  # the masked Protobuf message is JSON from then on
    assert secret_free(cards) and "o1" in cards and "***" in cards
    assert all(secret_free(m.payload + repr(m.headers).encode()) for m in replay.messages)
    await replay.close()
    page = pages.incident(runtime, actions, batch_id=incident.loss.batch_id)
    await page.reload()
    assert "o3" in page._summary.object and secret_free(page._summary.object)
    report = page.markdown()
    assert '"id": "o3"' in report and '"***"' in report and secret_free(report)

    # a notebook: its search and its decoding of a match
    notebook = NotebookConsole(runtime)
    for stream in ("PF_JSON", "PF_PB"):
        found, _ = await notebook.search(stream)
        assert len(found) >= 2 and all(secret_free(f.data + repr(f.headers).encode()) for f in found)
        decoded_and_masked(json.loads(found[0].data) if stream == "PF_JSON" else notebook.decoded(stream, found[0]), 1)

    # the API (and so MCP, whose tools are its calls): a search job, its export, an incident
    tokens = TokenStore(runtime.settings.data.data_dir)
    token = tokens.create("pf-bot", "support")
    fleet = Fleet(runtime.settings)
    fleet._runtimes[fleet.names[0]] = runtime
    fleet.unreached.clear()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(make_api(fleet, tokens)), base_url="http://console",
                                 headers={"Authorization": f"Bearer {token}"}) as api:
        started = await api.post("/api/v1/searches", json={"stream": "PF_PB"})
        assert started.status_code == 202, started.text

        async def done():
            return (await api.get(f"/api/v1/searches/{started.json()['id']}")).json()

        job = await eventually(done, lambda j: j["state"] != "running", 60, "the API's search")
        assert job["matched"] >= 2 and secret_free(json.dumps(job))
        exported = await api.get(f"/api/v1/searches/{job['id']}/export", params={"format": "jsonl"})
        assert exported.status_code == 200 and secret_free(exported.content)
        rows = [json.loads(line) for line in exported.text.splitlines()[1:]]  # after the filters' line
        assert len(rows) >= 2 and {row["encoding"] for row in rows} == {"json"}
        decoded_and_masked(json.loads(rows[0]["payload"]), 1)
        answer = await api.get(f"/api/v1/incidents/{incident.loss.batch_id}")
        assert answer.status_code == 200 and secret_free(answer.text)
        assert '"o3"' in answer.json()["messages"][0]["text"]

    # the command line's search, as the local role, with the same files
    cli = subprocess.run([CLI, "search", "PF_PB", "--format", "jsonl"], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, **env})
    assert cli.returncode == 0, cli.stderr
    rows = [json.loads(line) for line in cli.stdout.splitlines() if line.strip()]
    assert len(rows) >= 2 and secret_free(cli.stdout)
    decoded_and_masked(json.loads(rows[0]["payload"]), 1)


def test_a_page_that_shows_payloads_cannot_be_made_without_the_pipeline():
    with pytest.raises(TypeError, match="made with payloads="):
        ReplayPage()
