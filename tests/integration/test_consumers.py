"""Consumer lag against a real nats-server and real consumers of every kind: each number is the server's
consumer info, lag in seconds is the age the test knows, a stopped consumer stalls and a reading one does
not, and the changes (pause, resume, reset, unpin, delete) are applied, audited and refused as they must be."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import datetime, timedelta, timezone

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from console.broker.atomic import AtomicBatch
from console.broker.consumers import ConsumerAdmin
from console.commands import DeleteConsumer, PauseConsumer, ResetConsumer, ResumeConsumer, UnpinConsumer
from console.consumers import ConsumerWatch, only
from console.config import event_key
from console.domain.audit import Actor
from console.errors import ReadOnlyError, Refusal
from console.runtime import Runtime
from tests.integration.test_audit import settings_for
from tests.waits import eventually
from tests.processes import CLI


def admin_of(nc, read_only: bool = False) -> ConsumerAdmin:
    return ConsumerAdmin(lambda: nc, lambda: read_only)


@pytest.fixture
async def js(server):
    nc = await nats.connect(server.url)
    yield nc.jetstream()
    await nc.close()


async def a_stream(js, name: str, messages: int, **config) -> list[float]:
    """The stream with `messages` messages, and the wall time each was stored at (the test's truth)."""
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], **config))
    stored = []
    for i in range(messages):
        await js.publish(f"{name.lower()}.{i % 3}", b"m%d" % i)
        stored.append(time.time())
    return stored


async def test_every_number_of_every_kind_of_consumer_is_the_server_s_and_its_lag_the_true_age(server, js):
    stored = await a_stream(js, "KINDS", 60)
    await asyncio.sleep(1.5)  # an age of more than a second, so a lag of 0 would be wrong by more than the error
    await js.add_consumer("KINDS", ConsumerConfig(durable_name="stopped", ack_policy=AckPolicy.EXPLICIT))
    await js.add_consumer("KINDS", ConsumerConfig(durable_name="reading", ack_policy=AckPolicy.EXPLICIT))
    reading = await js.pull_subscribe_bind("reading", "KINDS")
    for m in await reading.fetch(25):
        await m.ack()
    await js.add_consumer("KINDS", ConsumerConfig(durable_name="redelivering", ack_policy=AckPolicy.EXPLICIT,
                                                  max_deliver=5, filter_subject="kinds.1"))
    redelivering = await js.pull_subscribe_bind("redelivering", "KINDS")
    [first] = await redelivering.fetch(1)
    await first.nak()
    while True:  # the nak is taken in its own time: read until the message comes again
        [again] = await redelivering.fetch(1)
        if again.metadata.sequence.stream == first.metadata.sequence.stream:
            break
    assert again.metadata.num_delivered == 2
    pushed = await js.subscribe("kinds.>", durable="pushed", manual_ack=True, config=ConsumerConfig(
        ack_policy=AckPolicy.EXPLICIT))
    for _ in range(10):
        await (await pushed.next_msg(timeout=5)).ack()
    ordered = await js.subscribe("kinds.2", ordered_consumer=True)
    for _ in range(20):
        await ordered.next_msg(timeout=5)
    await ordered.unsubscribe()  # an ordered consumer that went away (the server drops it after a while)
    ordered = await js.subscribe("kinds.2", ordered_consumer=True)
    await ordered.next_msg(timeout=5)

    watch = ConsumerWatch(admin_of(js._nc), only(["KINDS"]))
    found = {j.read.name: j for j in (await watch.read()).judged}
    for name in ("stopped", "reading", "redelivering", "pushed"):
        info = await js.consumer_info("KINDS", name)
        r = found[name].read
        assert (r.pending, r.ack_pending, r.redelivered, r.waiting, r.delivered_seq, r.ack_floor_seq) == (
            info.num_pending, info.num_ack_pending, info.num_redelivered, info.num_waiting,
            info.delivered.stream_seq, info.ack_floor.stream_seq), name
    kinds = {j.read.kind for j in found.values()}
    assert kinds == {"pull", "push", "ordered"}, kinds
    now = time.time()
    assert found["stopped"].lag_seconds == pytest.approx(now - stored[0], abs=1.0)
    assert found["reading"].lag_seconds == pytest.approx(now - stored[25], abs=1.0)
    assert found["pushed"].read.ack_pending + found["pushed"].read.pending == 50
    assert found["redelivering"].read.redelivered == 1
    await pushed.unsubscribe()


async def test_a_stopped_consumer_stalls_within_two_windows_and_one_reading_a_burst_never_does(server, js):
    await a_stream(js, "BURST", 20)
    for name in ("idle", "busy"):
        await js.add_consumer("BURST", ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT))
    busy = await js.pull_subscribe_bind("busy", "BURST")
    stop = asyncio.Event()

    async def publish_and_read():  # a burst: more published than read at each turn, every read acked
        while not stop.is_set():
            await asyncio.gather(*(js.publish("burst.x", b"b") for _ in range(40)))
            for m in await busy.fetch(20, timeout=2):
                await m.ack()

    load = asyncio.create_task(publish_and_read())
    watch = ConsumerWatch(admin_of(js._nc), only(["BURST"]), window=timedelta(seconds=2))
    states: dict[str, list[str]] = {"idle": [], "busy": []}
    began = time.monotonic()
    try:
        while "stalled" not in states["idle"]:
            assert time.monotonic() - began < 2 * 2 + 2, f"no stall within two windows: {states}"
            for j in (await watch.read(fresh_within=0)).judged:
                states[j.read.name].append(j.state)
            await asyncio.sleep(0.5)
    finally:
        stop.set()
        await load
    assert "stalled" not in states["busy"] and states["busy"][-1] in ("lagging", "ok"), states["busy"]


async def test_a_consumer_of_atomic_batches_is_counted_in_batches_read_whole_and_its_reader_is_not_listed(server, js):
    await js.add_stream(StreamConfig(name="UNITS", subjects=["units.>"], allow_atomic=True))
    for n in range(4):  # four batches of three, the last committed with an eob marker
        batch = AtomicBatch(js._nc, batch_id=f"unit-{n}")
        for i in range(3 if n == 3 else 2):
            await batch.add(f"units.{i}", b"x")
        await (batch.commit_eob() if n == 3 else batch.commit("units.2", b"x"))
    info = await js.stream_info("UNITS")
    assert info.state.last_seq == 12, "eob: the marker is not stored, so the fourth batch is the last message"
    await js.add_consumer("UNITS", ConsumerConfig(durable_name="halfway", ack_policy=AckPolicy.EXPLICIT))
    halfway = await js.pull_subscribe_bind("halfway", "UNITS")
    for m in await halfway.fetch(7):  # two batches whole and the third's first message
        await m.ack()
    await js.add_consumer("UNITS", ConsumerConfig(durable_name="some_subjects", filter_subject="units.1",
                                                  ack_policy=AckPolicy.EXPLICIT))
    await js.add_consumer("UNITS", ConsumerConfig(durable_name="done", ack_policy=AckPolicy.NONE))
    done = await js.pull_subscribe_bind("done", "UNITS")
    assert len(await done.fetch(12)) == 12

    watch = ConsumerWatch(admin_of(js._nc, read_only=True), only(["UNITS"]))  # counting is a read
    try:
        found = {j.read.name: j for j in (await watch.read(fresh_within=0)).judged}
        assert set(found) == {"halfway", "some_subjects", "done"}, "the console's own reader of the ends is not listed"
        assert len(await js.consumers_info("UNITS")) == 4, "the reader of the ends is there, an ordered consumer of the server's"
        assert (found["halfway"].batches.read_whole, found["halfway"].batches.ahead,
                                                     found["halfway"].batches.complete) == (2, 2, True)
        assert (found["halfway"].inside_batch, found["halfway"].read_of_batch) == ("unit-2", 1)
        assert (found["done"].batches.read_whole, found["done"].batches.ahead) == (4, 0)
        assert found["some_subjects"].batches is None, "a filtered consumer reads parts of batches: not counted"
        row = found["halfway"].as_json()
        assert (row["batches_read_whole"], row["batches_ahead"], row["batches_counted_whole"]) == (2, 2, True)

        batch = AtomicBatch(js._nc, batch_id="unit-4")  # a batch more: the reader follows the stream
        await batch.add("units.0", b"x")
        await batch.commit("units.1", b"x")

        async def counted() -> int:
            return next(j for j in (await watch.read(fresh_within=0)).judged if j.read.name == "halfway").batches.ahead

        await eventually(counted, lambda ahead: ahead == 3, what="the new batch counted ahead")
    finally:
        await watch.stop()


async def test_pause_resume_reset_unpin_and_delete_are_applied_audited_and_refused_as_they_must_be(server, js, tmp_path):
    await a_stream(js, "ACTS", 30)
    await js.add_consumer("ACTS", ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT))
    event_key(data_dir=tmp_path)
    console = await Runtime.open(settings_for(server.url, tmp_path))
    read_only = await Runtime.open(settings_for(server.url, tmp_path, read_only=True))
    try:
        ann = console.actions(Actor("ann"))
        until = datetime.now(timezone.utc) + timedelta(minutes=5)
        assert await ann.run(PauseConsumer("ACTS", "worker", until)) is not None
        assert (await admin_of(js._nc).info("ACTS", "worker")).paused
        [worker] = [j for j in (await console.consumers.read(fresh_within=0)).judged if j.read.key == ("ACTS", "worker")]
        assert worker.state == "paused"
        await ann.run(ResumeConsumer("ACTS", "worker"))
        assert not (await admin_of(js._nc).info("ACTS", "worker")).paused
        reset = await ann.run(ResetConsumer("ACTS", "worker", seq=21))
        assert (reset.delivered_seq, reset.pending) == (20, 10)
        with pytest.raises(Refusal) as refused:
            await ann.run(UnpinConsumer("ACTS", "worker", "jobs"))
        assert refused.value.err_code == 10160  # the server's: no such priority group
        with pytest.raises(ReadOnlyError):
            await read_only.actions(Actor("ann")).run(DeleteConsumer("ACTS", "worker"))
        viewer = console.actions(Actor("vic"), grants=console.roles.grants("viewer"))
        with pytest.raises(Exception, match="may not consumer.pause"):
            await viewer.run(PauseConsumer("ACTS", "worker", until))
        with pytest.raises(Exception, match="may not consumer.delete"):  # an operator neither: delete is admin's
            await console.actions(Actor("op"), grants=console.roles.grants("operator")).run(
                DeleteConsumer("ACTS", "worker"))
        await ann.run(DeleteConsumer("ACTS", "worker"))
        with pytest.raises(Refusal) as refused:
            await ann.run(DeleteConsumer("ACTS", "worker"))
        assert (refused.value.err_code, refused.value.description) == (10014, "consumer not found")
        trail = await console.audit.read(None)
        said = [(r.action, r.outcome) for _, r in trail.records if r.action.startswith("consumer.")
                and r.outcome != "attempted"]
        assert ("consumer.pause", "accepted") in said and ("consumer.reset", "accepted") in said
        assert ("consumer.delete", "accepted") in said and any(a == "consumer.unpin" and o != "accepted" for a, o in said)
    finally:
        await console.close()
        await read_only.close()


def cli(server, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "consumers", *args, "--server", server.url, "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)


async def test_the_cli_lists_as_json_and_refuses_hostile_names_and_times_before_sending(server, js, tmp_path):
    await a_stream(js, "CLI", 5)
    long_name = "c" * 255
    await js.add_consumer("CLI", ConsumerConfig(durable_name=long_name, ack_policy=AckPolicy.EXPLICIT))
    done = cli(server, tmp_path, "list", "--stream", "CLI", "--format", "json")
    assert done.returncode == 0, done.stderr
    [one] = json.loads(done.stdout)
    assert {k: one[k] for k in ("system", "stream", "consumer", "pending", "ack_pending", "redelivered", "state")} == {
        "system": "default", "stream": "CLI", "consumer": long_name, "pending": 5, "ack_pending": 0,
        "redelivered": 0, "state": "ok"}
    assert one["lag_seconds"] >= 0
    from console.cli import build_parser
    from console.cli.consumers import command_of
    from console.errors import ConsoleError

    now = datetime.now(timezone.utc)
    for args, said in [(("pause", "CLI", "bad\x01name", "--for", "1m"), "control character"),
                       (("pause", "CLI", "x" * 300, "--for", "1m"), "longer than"),
                       (("pause", "CLI", long_name, "--until", "2020-01-01T00:00:00Z"), "in the future"),
                       (("pause", "CLI", long_name, "--until", "\x1b[31mred"), "--until must be a time"),
                       (("pause", "CLI", long_name, "--for", "forever"), "--for must be a duration"),
                       (("pause", "CLI", long_name), "--until TIME | --for"),
                       (("reset", "CLI", long_name, "--seq", "0"), "--seq must be"),
                       (("reset", "CLI", long_name, "--time", "y" * 200), "--time must be a time"),
                       (("unpin", "CLI", long_name, "--group", "g\n"), "a group name")]:
        with pytest.raises(ConsoleError, match=said):
            command_of(build_parser().parse_args(["consumers", *args]), now)
    refused = cli(server, tmp_path, "list", "--window", "99999")
    assert refused.returncode == 2 and "--window" in refused.stderr, refused.stderr
    paused = cli(server, tmp_path, "pause", "CLI", long_name, "--for", "1m")
    assert paused.returncode == 0, paused.stderr
    assert (await admin_of(js._nc).info("CLI", long_name)).paused


async def test_ten_thousand_consumers_are_read_whole_and_one_deleted_meanwhile_costs_nothing(server, js):
    # nats-server 2.15 holds at most 1,000 consumers on a stream by default (10026): ten streams of them
    streams = [f"MANY{k}" for k in range(10)]
    for name in streams:
        await a_stream(js, name, 3)
    nc = js._nc
    gate = asyncio.Semaphore(64)

    async def make(stream: str, i: int) -> None:
        async with gate:
            reply = await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}", json.dumps({"stream_name": stream, "config": {
                "name": f"c{i}", "ack_policy": "none", "mem_storage": i % 2 == 0,
                "inactive_threshold": 600 * 10 ** 9}}).encode(), timeout=30)
            assert b'"error"' not in reply.data, reply.data

    await asyncio.gather(*(make(stream, i) for stream in streams for i in range(1_000)))
    admin = admin_of(nc)
    deleting = asyncio.gather(*(nc.request(f"$JS.API.CONSUMER.DELETE.MANY0.c{i}", b"", timeout=30) for i in range(50)))
    found = await admin.read(streams)
    await deleting
    assert 9_950 <= len(found.consumers) <= 10_000 and not found.unread and not found.malformed
    # a page per 256 consumers, and one message get for each stream's place its consumers share
    assert found.requests <= 10 * (1_000 // 256 + 2) + 10
    again = await admin.read(streams)
    assert len(again.consumers) == 9_950


async def test_a_notebook_reads_the_consumers_as_a_frame_of_the_server_s_numbers(server, js, tmp_path):
    from console.widgets import NotebookConsole

    await a_stream(js, "NOTE", 7)
    await js.add_consumer("NOTE", ConsumerConfig(durable_name="analyst", ack_policy=AckPolicy.EXPLICIT))
    event_key(data_dir=tmp_path)
    console = await NotebookConsole.connect(server.url, data_dir=tmp_path)
    try:
        frame = await console.consumers("NOTE")
        assert frame[["stream", "consumer", "pending", "ack_pending", "state"]].values.tolist() == [
            ["NOTE", "analyst", 7, 0, "ok"]]
        page = await console.page("/consumers", stream="NOTE")
        assert page.rows["consumer"].tolist() == ["analyst"] and page.rows["pending"].tolist() == [7]
    finally:
        await console.close()
