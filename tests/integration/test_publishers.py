"""Every loss names its publisher as the server knows the connection (CONNZ), whatever its client: a
nats.js publisher (the Node client, from npm) and nats-py publishers on two streams, with fail-mode
gaps and a dropped batch."""

import asyncio
import json
import subprocess

import nats
import nats.aio.client
import pytest
from nats.js.api import StreamConfig

from console.broker.connection import flush
from console.broker.fast import FastBatch
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.events import LOST_KINDS, EventKind
from tests.integration.test_collector_sources import ACCOUNTS, _lose_a_fast_batch, connect_as
from tests.conftest import TEST_LIMITS
from tests.integration.conftest import PEER
from tests.waits import eventually, events_for

@pytest.fixture(scope="module")
def accounts_server(tmp_path_factory):
    from console.broker.server import EmbeddedServer

    with EmbeddedServer(tmp_path_factory.mktemp("publishers"), batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as s:
        yield s


async def test_nats_js_and_nats_py_losses_on_two_streams_name_stream_and_publisher(accounts_server, natsjs):
    server = accounts_server
    app = await connect_as(server, "app", "app-secret")
    sys_nc = await connect_as(server, "sys", "sys-secret")
    py = await connect_as(server, "app", "app-secret", name="ledger-py")
    collector = Collector(app, CollectorSettings(tick_every=0.1), system_nc=sys_nc)
    await collector.start()
    js = None
    try:
        for name in ("LEDGER_JS", "LEDGER_PY"):
            await app.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"],
                                                          allow_batched=True))
        # nats.js stays connected until the test is done with it: a publisher gone before the collector asks
        # the servers who it was stays unknown (console/collector/publishers.py), which a loaded CI once met
        js = subprocess.Popen(["node", str(PEER / "fast_gap.mjs"), server.url, "app", "app-secret", "ledger_js.x",
                               "js-gap-1", "ledger-js"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        js_cid = json.loads(await asyncio.to_thread(js.stdout.readline))["cid"]
        py_gap = await _lose_a_fast_batch(py, "ledger_py.x")
        dropped = FastBatch(py, flow=5, gap_mode="fail")  # acked at 5, silent before the next ack: dropped
        for _ in range(7):
            await dropped.add("ledger_py.y", b"x")
        expected = {"js-gap-1": ("ledger-js", "nats.js", natsjs, js_cid, "LEDGER_JS"),
                    py_gap: ("ledger-py", "python3", nats.aio.client.__version__, py.client_id, "LEDGER_PY"),
                    dropped.batch_id: ("ledger-py", "python3", nats.aio.client.__version__, py.client_id, "LEDGER_PY")}
        events = await events_for(app, set(expected), lambda es: {e.batch_id for e in es if e.kind in LOST_KINDS}
                                  == set(expected), timeout=30)
        js.stdin.close()
        assert await asyncio.to_thread(js.wait, 60) == 0
        losses = [e for e in events if e.kind in LOST_KINDS]
        assert {e.kind for e in losses} == {EventKind.FAST_ENDED_EARLY, EventKind.FAST_DROPPED}
        for loss in losses:
            name, lang, version, cid, stream = expected[loss.batch_id]
            p = loss.publisher
            assert p is not None, loss
            assert (p.name, p.lang, p.version, p.cid, p.user, p.account) == (name, lang, version, cid, "app", "APP")
            # A dropped fast batch never hears its stream named (no PubAck, no error): its connection's last.
            assert loss.stream == stream if loss.kind is EventKind.FAST_ENDED_EARLY else \
                (loss.stream, loss.probable_stream) == (None, stream), loss
        status = await collector.status()
        assert status.connz_requests == 2  # one per publishing connection, not per batch
    finally:
        if js is not None and js.poll() is None:
            js.kill()
        await collector.stop()
        for nc in (app, sys_nc, py):
            await nc.close()


async def test_a_committed_batch_with_an_earlier_gap_ends_up_on_its_stream_everywhere(accounts_server):
    """Its gap goes out under no stream (the gap reply names none); its PubAck names the stream, and the
    collector says so: the alert does not page on "(unknown)" meanwhile and fires once, on the stream; the
    metrics count the gap there, Live shows the batch on the stream."""
    from datetime import datetime, timedelta, timezone

    from console.alerting.metrics import Metrics
    from console.alerting.rules_file import DEFAULT_RULES
    from console.domain.alert_rules import parse_rules
    from console.domain.alerting import Evaluator

    app = await connect_as(accounts_server, "app", "app-secret")
    collector = Collector(app, CollectorSettings(tick_every=0.1))
    await collector.start()
    try:
        await app.jetstream().add_stream(StreamConfig(name="LATE_NAMED", subjects=["late_named.>"], allow_batched=True))
        batch = FastBatch(app, flow=5, gap_mode="ok")
        for seq in range(1, 21):
            if seq == 10:
                batch.skip_seq(2)
            await batch.add("late_named.x", b"x")
        ack = await batch.commit_eob()
        assert ack.stream == "LATE_NAMED"
        events = await events_for(app, {batch.batch_id},
                                  lambda es: any(e.kind is EventKind.FAST_COMMITTED for e in es))
    finally:
        await collector.stop()
        await app.close()
    [gap] = [e for e in events if e.kind is EventKind.FAST_GAP]
    [attributed] = [e for e in events if e.kind is EventKind.FAST_ATTRIBUTED]
    assert (gap.stream, attributed.stream) == (None, "LATE_NAMED")
    evaluator, metrics = Evaluator(parse_rules(DEFAULT_RULES.read_text())), Metrics()
    before = events.index(attributed)
    for event in events[:before]:
        evaluator.apply(event)
        metrics.observe(event)
    now = datetime.now(timezone.utc)
    assert evaluator.evaluate(now) == []  # under no stream, within its grace: its stream is a moment away
    for event in events[before:]:
        evaluator.apply(event)
        metrics.observe(event)
    after = evaluator.evaluate(now + timedelta(seconds=1))
    assert [(n.stream, n.status) for n in after] == [("LATE_NAMED", "firing")]
    assert metrics.lost_messages.samples == {("LATE_NAMED",): 2.0}


async def test_a_question_a_stalled_server_does_not_answer_in_time_is_asked_again(tmp_path):
    """A server too busy to answer CONNZ within its time (stopped here) is asked again, waiting longer,
    and names the publisher once it answers; a conformance row of a loaded system's publisher once lost
    its name this way. Asked again at most ASK_AGAIN times."""
    import os
    import signal

    from console.broker.server import EmbeddedServer
    from console.collector.publishers import Publishers
    from tests.waits import wait_until

    with EmbeddedServer(tmp_path, batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as server:
        sys_nc = await connect_as(server, "sys", "sys-secret")
        py = await connect_as(server, "app", "app-secret", name="stalled-py")
        await py.subscribe("_INBOX.stalled.>")
        await flush(py)
        publishers = Publishers(sys_nc, "APP", answer_within=0.3)
        os.kill(server.pid, signal.SIGSTOP)
        try:  # stopped once every thread is: a thread on another core answers for a moment after the signal
            await wait_until(lambda: _stopped(server.pid), what="the server stopped")
            publishers.saw("_INBOX.stalled.batch1.10.ok.1.0.$FI")
            await wait_until(lambda: publishers.requests == 2,
                             what=f"the question asked again ({publishers.requests} asked, {dict(publishers.errors)})")
        finally:
            os.kill(server.pid, signal.SIGCONT)
        named = await asyncio.wait_for(asyncio.shield(publishers._known["_INBOX.stalled"]), 10)
        assert named is not None and named.name == "stalled-py"
        assert publishers.requests in (2, 3) and dict(publishers.errors) == {}
        await py.close()
        await sys_nc.close()


def _stopped(pid: int) -> bool:
    from pathlib import Path

    states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in Path(f"/proc/{pid}/task").iterdir()]
    return all(state == "T" for state in states)


async def test_each_publishers_atomic_batches_and_their_messages_are_in_the_stream_totals(accounts_server):
    """Loss budgets per publisher need each one's atomic batches: the publish side sees them open, CONNZ
    names who sent them, and the stream totals carry both (cumulative) with the messages their commits
    stored (an eob commit stores one fewer than it sent)."""
    from console.broker.atomic import AtomicBatch
    from console.broker.eventlog import EventLog

    server = accounts_server
    app = await connect_as(server, "app", "app-secret")
    sys_nc = await connect_as(server, "sys", "sys-secret")
    billing = await connect_as(server, "app", "app-secret", name="billing-py")
    ledger = await connect_as(server, "app", "app-secret", name="ledger-py")
    collector = Collector(app, CollectorSettings(tick_every=0.1, totals_every=0.5, tap_publish_subjects=("bill.>",)),
                          system_nc=sys_nc)
    await collector.start()
    try:
        await app.jetstream().add_stream(StreamConfig(name="BILL", subjects=["bill.>"], allow_atomic=True))
        for nc, size, eob in ((billing, 5, False), (billing, 3, True), (ledger, 4, False)):
            batch = AtomicBatch(nc)
            for _ in range(size - 1):
                await batch.add("bill.x", b"m")
            await (batch.commit_eob() if eob else batch.commit("bill.x", b"m"))
        client = f"(python3 {nats.aio.client.__version__})"
        want = {f"billing-py {client}": [2, 7], f"ledger-py {client}": [1, 4]}  # 5 + (3 sent, eob: 2 stored)

        def totals(found) -> dict | None:
            for _, event in reversed(found):
                if event.kind is EventKind.STREAM_TOTALS:
                    return json.loads(event.detail).get("atomic_publishers", {}).get("BILL")
            return None

        log = EventLog.over(app)
        await eventually(lambda: log.read(1, idle_timeout=0.2), lambda found: totals(found) == want, timeout=30,
                         what="each publisher's atomic batches in the stream totals")
    finally:
        await collector.stop()
        for nc in (app, sys_nc, billing, ledger):
            await nc.close()
