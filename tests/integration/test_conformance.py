"""The conformance report against a real server, a real collector and real clients: nats.js 3.4 (its
own fast-ingest and atomic API, from npm) and the console's own publisher conform; a deliberately
wrong raw nats-py publisher per statement is caught by its statement and only by it; on a three-node
cluster a client is named through a node that is neither the collector's nor the stream leader's."""

import asyncio
import json
import subprocess
from dataclasses import replace

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.admin import StreamAdmin
from console.broker.atomic import AtomicBatch
from console.broker.eventlog import EventLog
from console.broker.fast import FastBatch
from console.collector.collector import Collector
from console.config import CollectorSettings, DataSettings, Settings
from console.domain.conformance import FAIL, PASS, STATEMENTS, Verdicts
from tests.conftest import TEST_LIMITS
from tests.integration.faulty_publishers import (
    FAULTY, RawFast, b01_retries_without_backing_off, committed, f07_pings_ahead, fast_stream, within_windows,
)
from tests.integration.test_collector_sources import ACCOUNTS, connect_as
from tests.integration.conftest import PEER
from tests.waits import eventually

GRADING = dict(tick_every=0.1, status_every=0.3, tap_publish_subjects=("conf.>", "conform_fast.>", "conform_atomic.>"))


@pytest.fixture(scope="module")
def accounts_server(tmp_path_factory):
    from console.broker.server import EmbeddedServer

    with EmbeddedServer(tmp_path_factory.mktemp("conformance"), batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as s:
        yield s


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Settings:
    """A data directory with its event key: the collector signs, a notebook's runtime reads."""
    base = Settings()
    return replace(base, data=DataSettings(data_dir=tmp_path_factory.mktemp("conformance-data")))


@pytest.fixture(scope="module")
async def grading(accounts_server, settings):
    app = await connect_as(accounts_server, "app", "app-secret")
    sys_nc = await connect_as(accounts_server, "sys", "sys-secret")
    collector = Collector(app, CollectorSettings(**GRADING), settings.keyed_event_log(make=True), system_nc=sys_nc)
    await collector.start()
    yield app, collector
    await collector.stop()
    await app.close()
    await sys_nc.close()


async def verdicts_when(log: EventLog, until, timeout: float = 40.0) -> Verdicts:

    async def read() -> Verdicts:
        found = Verdicts()
        for _, event in await log.read(1, kind_filter="conformance.>", idle_timeout=0.2):
            found.apply(event)
        return found

    return await eventually(read, until, timeout, "the verdicts", every=0.3)


def of(verdicts: Verdicts, name: str):
    return next((v for v in verdicts.report() if v.publisher and v.publisher.name == name), None)


def log_of(app, settings) -> EventLog:
    return EventLog(app.jetstream(), settings.keyed_event_log())


@pytest.fixture(scope="module")
async def faulty_verdicts(accounts_server, grading, settings):
    """Every faulty publisher at once, each on its own connection and stream; the verdicts once every
    batch of each has been graded."""
    app, _ = grading
    clients = {sid: await connect_as(accounts_server, "app", "app-secret", name=f"faulty-{sid}") for sid in FAULTY}
    helper = await connect_as(accounts_server, "app", "app-secret", name="b01-helper")
    clients["B01"] = await connect_as(accounts_server, "app", "app-secret", name="faulty-B01")
    try:
        runs = [FAULTY[sid](clients[sid]) for sid in FAULTY] + [b01_retries_without_backing_off(clients["B01"], helper)]
        batches = dict(zip([*FAULTY, "B01"], await asyncio.gather(*runs)))

        def graded(found: Verdicts) -> bool:
            return all((v := of(found, f"faulty-{sid}")) is not None and v.batches >= n for sid, n in batches.items())

        yield await verdicts_when(log_of(app, settings), graded, timeout=60)
    finally:
        for nc in (*clients.values(), helper):
            await nc.close()


def test_every_statement_has_a_faulty_publisher_so_none_goes_ungraded():
    """A statement added to ADR-50's list without the faulty publisher that breaks it would never be shown
    to be graded: the test below runs each one and holds that its statement alone fails it."""
    assert set(FAULTY) | {"B01"} == set(STATEMENTS)


@pytest.mark.parametrize("statement", [*FAULTY, "B01"])
async def test_a_faulty_publisher_is_caught_by_its_statement_and_only_by_it(faulty_verdicts, statement):
    verdict = of(faulty_verdicts, f"faulty-{statement}")
    assert verdict.failing == [statement], {s: verdict.results[s].examples for s in verdict.failing}
    assert verdict.publish_side
    [example, *_] = verdict.results[statement].examples
    assert example.batch_id and example.detail


async def test_the_report_names_each_failure_with_the_adrs_words_and_its_batch(faulty_verdicts):
    from console.conformance import as_json, markdown, text

    report = faulty_verdicts.report()
    written = text(report)
    assert "FAIL  F05 keeps within its outstanding-ack window" in written
    assert "maintain a count of maximum outstanding acknowledgements" in written
    parsed = json.loads(as_json(report))
    f05 = next(c for c in parsed["clients"] if c["publisher"] and c["publisher"]["name"] == "faulty-F05")
    assert f05["conforms"] is False and f05["results"]["F05"]["status"] == FAIL
    assert f05["results"]["F05"]["examples"][0]["batch"]
    assert "| F05 keeps within its outstanding-ack window | fail |" in markdown(report)


async def test_nats_js_and_the_consoles_own_publisher_conform(accounts_server, grading, settings, natsjs):
    app, _ = grading
    for name, flag in (("CONFORM_FAST", "allow_batched"), ("CONFORM_ATOMIC", "allow_atomic")):
        await app.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], **{flag: True}))
    done = await asyncio.to_thread(
        subprocess.run, ["node", str(PEER / "conformant.mjs"), accounts_server.url, "app", "app-secret",
                         "conform_fast.js", "conform_atomic.js", "natsjs-conformant"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    js = json.loads(done.stdout.splitlines()[-1])
    assert (js["fast"], js["eob"], js["atomic"]) == (200, 40, 11)
    own = await connect_as(accounts_server, "app", "app-secret", name="own-publisher")
    try:
        for mode in ("fail", "ok"):
            fast = FastBatch(own, flow=10, gap_mode=mode)
            for _ in range(150):
                await fast.add("conform_fast.py", b"x")
            await fast.ping()
            await (fast.commit("conform_fast.py", b"x") if mode == "fail" else fast.commit_eob())
        for eob in (False, True):
            atomic = AtomicBatch(own)
            for _ in range(10):
                await atomic.add("conform_atomic.py", b"x")
            await (atomic.commit_eob() if eob else atomic.commit("conform_atomic.py", b"x"))

        def both(found: Verdicts) -> bool:
            js_v, own_v = of(found, "natsjs-conformant"), of(found, "own-publisher")
            return js_v is not None and own_v is not None and js_v.batches >= 3 and own_v.batches >= 4

        found = await verdicts_when(log_of(app, settings), both)
    finally:
        await own.close()
    for name, passing in (("natsjs-conformant", {"F01", "F02", "F03", "F04", "F05", "F06", "F07", "F11", "F12",
                                                  "A01", "A02", "A03", "A05", "A06", "A08"}),
                          ("own-publisher", {"F01", "F02", "F03", "F04", "F05", "F06", "F07", "F11", "F12",
                                             "A01", "A02", "A03", "A04", "A05", "A06", "A07", "A08"})):
        verdict = of(found, name)
        assert verdict.failing == [], (name, {s: verdict.results[s].examples for s in verdict.failing})
        assert {s for s in verdict.results if verdict.status(s) == PASS} >= passing, (name, verdict.results)
    assert of(found, "natsjs-conformant").publisher.lang == "nats.js"


async def test_nats_jetstream_extra_is_graded_on_the_wire_beside_nats_js(accounts_server, grading, settings, jsextra):
    """nats-jetstream-extra 0.1.0 (Python 3.13, its own venv), written by no one here: a fail-mode fast
    batch, an ok-mode one ended without a message, an atomic batch; graded by the collector from the wire."""
    from tests.integration.conftest import JSEXTRA

    app, _ = grading
    for name, flag in (("CONFORM_FAST", "allow_batched"), ("CONFORM_ATOMIC", "allow_atomic")):  # nats.js's too
        await app.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], **{flag: True}))
    done = await asyncio.to_thread(
        subprocess.run, [str(jsextra), str(JSEXTRA / "conformant.py"), accounts_server.url, "app", "app-secret",
                         "conform_fast.extra", "conform_atomic.extra"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert (out["fast"], out["eob"], out["atomic"]) == (200, 40, 11)

    def graded(found: Verdicts):
        return next((v for v in found.report() if v.publisher and v.publisher.cid == out["cid"] and v.batches >= 3),
                    None)

    verdict = graded(await verdicts_when(log_of(app, settings), graded))
    assert (verdict.publisher.lang, verdict.publisher.version, verdict.publisher.name) == ("python", "0.2.0", None)
    assert verdict.failing == [], {s: verdict.results[s].examples for s in verdict.failing}
    assert {s for s in verdict.results if verdict.status(s) == PASS} == {
        "F01", "F02", "F03", "F04", "F05", "F06", "F11", "F12", "A01", "A02", "A03", "A05", "A06", "A08"}


async def test_a_client_on_another_node_of_a_cluster_is_named_in_its_verdict(accounts_cluster):
    urls = accounts_cluster.urls
    app = await nats.connect(urls[0], user="app", password="app-secret")
    await eventually(lambda: app.jetstream().add_stream(StreamConfig(
        name="F_F07", subjects=["conf.f_f07.>"], allow_batched=True, num_replicas=3)), what="F_F07 placed")
    leader = await eventually(lambda: StreamAdmin(app).leader("F_F07"), what="F_F07's leader")
    others = [(node, url) for node, url in zip(("n1", "n2", "n3"), urls) if node != leader]
    collector_nc = await nats.connect(others[0][1], user="app", password="app-secret")
    sys_nc = await nats.connect(others[0][1], user="sys", password="sys-secret")
    client = await nats.connect(others[1][1], user="app", password="app-secret", name="faulty-F07")
    collector = Collector(collector_nc, CollectorSettings(**GRADING), system_nc=sys_nc)
    await collector.start()
    try:
        await f07_pings_ahead(client)
        found = await verdicts_when(EventLog(collector_nc.jetstream()), lambda f: of(f, "faulty-F07") is not None)
        verdict = of(found, "faulty-F07")
        assert verdict.failing == ["F07"]
        assert (verdict.publisher.server, verdict.publisher.cid) == (others[1][0], client.client_id)
    finally:
        await collector.stop()
        for nc in (app, collector_nc, sys_nc, client):
            await nc.close()


async def test_the_check_batch_030_names_each_client_that_does_not_conform(faulty_verdicts, grading, settings):
    from console.checks import conformance_of
    from console.domain.checks import Facts, evaluate

    app, _ = grading
    events = [e for _, e in await log_of(app, settings).read(1, kind_filter="conformance.>", idle_timeout=0.2)]
    report = evaluate(Facts(nonconforming=conformance_of(events)), codes=["BATCH_030"])
    named = {f.evidence.split(" (")[0] for f in report.findings}
    assert {f"faulty-{sid}" for sid in [*FAULTY, "B01"]} <= named
    assert all(f.code == "BATCH_030" and f.severity == "warning" for f in report.findings)
    assert "natsjs-conformant" not in " ".join(f.evidence for f in report.findings)
    assert evaluate(Facts(nonconforming=conformance_of([])), codes=["BATCH_030"]).unchecked  # no verdicts: unchecked


async def test_a_flood_of_forged_replies_under_new_prefixes_is_bounded_and_grading_goes_on(accounts_server, grading,
                                                                                          settings):
    """Anyone on the account can publish on `$FI` reply subjects: ten thousand forged refusals, each
    under a prefix of its own, leave a bounded number of questions waiting and the grading alive."""
    from console.collector.publishers import MAX_WAITING

    app, collector = grading
    forger = await connect_as(accounts_server, "app", "app-secret", name="forger")
    refusal = b'{"error":{"code":400,"err_code":10206,"description":"batch publish pattern is invalid"}}'
    try:
        for i in range(10_000):
            await forger.publish(f"_INBOX.forged{i}.b{i}.10.ok.3.0.$FI", refusal)  # a start at 3: refused by our parser
        await forger.flush()
        await eventually(lambda: asyncio.sleep(0, collector.tapped), lambda n: n >= 10_000, 30, "the flood tapped")
        assert collector.publishers.waiting <= MAX_WAITING
        assert len(asyncio.all_tasks()) < 2 * MAX_WAITING + 100
        honest = await connect_as(accounts_server, "app", "app-secret", name="faulty-F05-after-flood")
        try:
            batch = await RawFast(honest, await fast_stream(honest, "F_FLOOD")).open()
            await batch.start()
            for seq in range(2, 120):
                await batch.send(seq)
            await batch.send(120, 2)
            await batch.until('"batch"')
            found = await verdicts_when(log_of(app, settings), lambda f: (v := of(f, "faulty-F05-after-flood")) is not None
                                        and v.failing == ["F05"], timeout=60)
            assert of(found, "faulty-F05-after-flood").failing == ["F05"]
        finally:
            await honest.close()
    finally:
        await forger.close()


async def test_a_notebook_has_the_conformance_page_with_the_same_verdicts(faulty_verdicts, grading, settings):
    from console.runtime import Runtime
    from console.widgets import NotebookConsole

    app, _ = grading
    notebook = NotebookConsole(Runtime(settings, app))
    page = await notebook.conformance(failing_only=True)
    shown = set(page.matrix["client"])
    assert {v.name for v in faulty_verdicts.report() if v.failing} <= shown
    assert "F05 keeps within its outstanding-ack window" in set(page.failures["statement"])


async def test_forged_replies_on_an_innocent_clients_inbox_do_not_fail_it(accounts_server, grading, settings):
    """Any client of the account may publish on another's inbox: before, forged replies alone marked a
    conformant client as failing F01, F04 and F12. Now they are unconfirmed, named as what they rest on,
    and the publish side it was tapped on says the replies were likely forged."""
    app, _ = grading
    innocent = await connect_as(accounts_server, "app", "app-secret", name="innocent")
    forger = await connect_as(accounts_server, "app", "app-secret", name="forger")
    try:
        batch = await RawFast(innocent, await fast_stream(innocent, "F_FORGED")).open()
        await batch.start()
        ack = b'{"type":"ack","seq":0,"msgs":10}'
        await forger.publish(batch.reply_to(7, 0), ack)  # "a start at sequence 7" (F01)
        await forger.publish(batch.reply_to(1, 0), ack)  # "a second start of an open id" (F12)
        await forger.publish(batch.reply_to(3, 1, flow=20), ack)  # "another flow" (F04)
        await forger.flush()
        await within_windows(batch, 2, 5)
        await committed(batch, 6)

        def graded(found: Verdicts) -> bool:
            return (v := of(found, "innocent")) is not None and v.batches >= 1 and bool(v.unconfirmed)

        verdict = of(await verdicts_when(log_of(app, settings), graded, timeout=60), "innocent")
        assert verdict.failing == [] and verdict.publish_side, verdict.results
        assert set(verdict.unconfirmed) <= {"F01", "F04", "F12"} and verdict.unconfirmed, verdict.unconfirmed
        for sid in verdict.unconfirmed:
            example = verdict.results[sid].examples[0]
            assert "forge" in example.rests_on and "the publish side saw otherwise" in example.detail, example
    finally:
        await innocent.close()
        await forger.close()
