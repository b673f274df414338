"""Loss manifests and their repair, against a real nats-server, a real collector process and a probe that
takes part (`--repair`): each kind of loss gets its manifest, exact against what the probe sent and what
the stream holds; the probe sends again exactly what is missing; the console reads the stream back and
calls it repaired only when every missing message is there once. Forged manifests and reports change
nothing."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nats
import pytest

from console.broker.eventlog import EventLog
from console.broker.fast import FastBatch
from console.broker.repair import MSG_ID, Repairer, SentWindow
from console.broker.server import EmbeddedServer
from console.config import DataSettings, EventLogSettings, Settings
from console.domain.events import EventKind
from console.domain.fast_busy import MAX_TAIL_RUNS
from console.domain.fast_ingest import GapMode
from console.domain.fast_tracker import FastBatchTracker
from console.domain.manifests import REPAIR_OF, SUBJECT, Manifest, RepairReport, Span, manifest_id, manifest_of
from console.domain.signing import SIGNATURE, signature
from console.manifests import ManifestKeeper
from console.probe import ProbeOptions, run_probe
from tests.conftest import TEST_LIMITS
from tests.integration.faulty_publishers import RawFast
from tests.processes import CLI, wait_collecting
from tests.waits import eventually


def holds(check):
    """An awaitable probe of a plain condition, for `eventually`."""
    async def probe():
        return check()
    return probe


@dataclass(frozen=True)
class Collected:
    log: EventLogSettings
    data_dir: Path

    @property
    def key(self) -> bytes | None:
        return self.log.key


@pytest.fixture(scope="module")
def collector(server, tmp_path_factory):
    data = tmp_path_factory.mktemp("manifests")
    log = open(data / "collector.log", "w")
    # a fast batch dropped before any PubAck is named no stream by its replies: the publish side tells it
    proc = subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", str(data), "--batch-timeout", "1",
                             "--tap-publish-side", "man_inferred.>"],
                            stdout=log, stderr=subprocess.STDOUT)
    wait_collecting(proc, data / "collector.log")
    yield Collected(Settings(data=DataSettings(data_dir=data)).keyed_event_log(make=False), data)
    proc.terminate()
    proc.wait(timeout=60)


@pytest.fixture
async def keeper(server, collector):
    nc = await nats.connect(server.url)
    kept = ManifestKeeper(nc, EventLog.over(nc, collector.log))
    stop = asyncio.Event()
    task = asyncio.create_task(kept.run(stop))
    await eventually(holds(lambda: kept.caught_up), what="the keeper following the log")
    yield kept
    stop.set()
    await task
    await nc.close()


async def stored(nc, stream: str) -> list[tuple[int, dict]]:
    """Every message of the stream as (stream seq, headers), read by the test itself."""
    js = nc.jetstream()
    info = await js.stream_info(stream)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        out.append((seq, msg.headers or {}))
    return out


@pytest.mark.parametrize("kind,gap_mode,expected_missing,kind_said,certainty", [
    ("fast", GapMode.OK, [Span(5, 5)], "fast_gap", "exact"),
    ("fast", GapMode.FAIL, [Span(5, None)], "fast_ended", "bounded"),
    ("atomic", GapMode.FAIL, [Span(1, None)], "atomic_abandoned", "bounded"),
])
async def test_each_kind_of_loss_has_its_exact_manifest_and_is_repaired_once(server, collector, keeper, kind, gap_mode,
                                                                             expected_missing, kind_said, certainty):
    stream = f"MAN_{kind.upper()}_{gap_mode.value.upper()}"
    nc = await nats.connect(server.url)
    try:
        options = ProbeOptions(kind, stream=stream, subject=f"{stream.lower()}.x", count=12, batch_size=12, flow=2,
                               gap_mode=gap_mode, skip_seq=5, repair=True, repair_wait=60, timeout=3)
        report = await run_probe(nc, options, repair_key=collector.key)
        [outcome] = report.repairs
        manifest = keeper.manifests[manifest_id(stream, report.batch_ids[0])]
        assert (manifest.kind, list(manifest.missing), manifest.certainty) == (kind_said, expected_missing, certainty)
        assert outcome.state == "repaired", (outcome, manifest)
        messages = await stored(nc, stream)
        # the truth: every batch sequence the probe published or meant to (the skipped one; in fail mode it stops
        # where the server ended the batch) is in the stream exactly once
        through = manifest.through or 12
        assert report.messages_sent + 1 <= through <= 12
        ids = [h.get(MSG_ID) for _, h in messages]
        assert sorted(ids) == sorted(f"{report.batch_ids[0]}.{s}" for s in range(1, through + 1)), ids
        resent = [h for _, h in messages if h.get(REPAIR_OF) == report.batch_ids[0]]
        assert len(resent) == sum(len(s.seqs(12)) for s in manifest.found)
    finally:
        await nc.close()


async def test_forged_manifests_make_the_publisher_send_nothing_and_forged_reports_repair_nothing(server, collector,
                                                                                                  keeper):
    stream = "MAN_FORGED"
    nc = await nats.connect(server.url)
    forger = await nats.connect(server.url)
    try:
        clean = await run_probe(nc, ProbeOptions("atomic", stream=stream, subject="man_forged.x", count=5, batch_size=5,
                                                 repair=True, repair_wait=1))
        assert clean.batches_committed == 1 and clean.repairs == []  # nothing lost, nothing waited for
        batch = clean.batch_ids[0]
        window = SentWindow()
        for seq in range(1, 6):
            window.keep(batch, seq, "man_forged.x", b"p", {}, stream)
        window.committed(batch)
        lost = "forged-lost-batch"
        for seq in range(1, 4):
            window.keep(lost, seq, "man_forged.x", b"p", {}, stream)
        window.lost(lost, Span(2, 2))  # its own replies: only 2 was lost
        window.settle(batch)
        window.settle(lost)
        unsigned = Repairer(nc, window, key=collector.key, streams=(stream,))
        trusting = Repairer(nc, window, key=None, streams=(stream,))
        await unsigned.start()
        await trusting.start()

        def forged(batch_id: str, missing: list) -> bytes:
            return Manifest(manifest_id(stream, batch_id), stream, batch_id, "atomic_abandoned", tuple(missing),
                            "exact", "forged", datetime.now(timezone.utc)).to_json()

        before = (await nc.jetstream().stream_info(stream)).state.messages
        await forger.publish(f"{SUBJECT}.{stream}", forged(batch, [Span(1, None)]))  # a committed batch
        await forger.publish(f"{SUBJECT}.{stream}", forged(lost, [Span(1, 3)]))  # more than was lost
        body = forged(lost, [Span(1, 3)])
        await forger.publish(f"{SUBJECT}.{stream}", body, headers={SIGNATURE: signature(b"not the key", body)})
        await forger.flush()
        await eventually(holds(lambda: len(trusting.reports) == 2), what="the trusting publisher's two answers")
        assert trusting.reports[manifest_id(stream, batch)].state == "not_repairable"
        said = trusting.reports[manifest_id(stream, lost)]
        assert (said.state, said.resent) == ("resent", (Span(2, 2),)), "only what its own replies said was lost"
        assert unsigned.reports == {} and sum(unsigned.refused.values()) == 3  # none signed with the key
        assert (await nc.jetstream().stream_info(stream)).state.messages == before + 1  # seq 2 of `lost`, once
        heard = trusting.heard
        await forger.publish(f"{SUBJECT}.{stream}", forged(lost, [Span(1, 3)]))  # again: sent again never twice
        await forger.flush()
        await eventually(holds(lambda: trusting.heard > heard), what="the second copy heard")
        assert (await nc.jetstream().stream_info(stream)).state.messages == before + 1

        # a report any client can publish: the console checks the stream, and it holds none of the batch (its
        # originals would count: a message the stream holds once is there, whoever says it was lost)
        real = "lost-and-never-resent"
        keeper.manifests[manifest_id(stream, real)] = Manifest(
            manifest_id(stream, real), stream, real, "atomic_abandoned", (Span(1, 5),), "exact", "a test",
            datetime.now(timezone.utc) - timedelta(seconds=1))
        await forger.publish(f"repair.{stream}", b"{}")
        report = RepairReport(manifest_id(stream, real), stream, real, "resent", (Span(1, 5),), "trust me", 5)
        await forger.publish(f"batch_console.repair.{stream}", report.to_json())
        await eventually(holds(lambda: keeper.manifests[manifest_id(stream, real)].state == "resent"), what="the claim kept")
        await eventually(holds(lambda: keeper.read_back.get(manifest_id(stream, real), 0) >= 2),
                         what="the stream read back twice")
        assert keeper.manifests[manifest_id(stream, real)].state == "resent", "a claim alone repairs nothing"
        await unsigned.stop()
        await trusting.stop()
    finally:
        await nc.close()
        await forger.close()


async def test_a_batch_the_publisher_no_longer_holds_is_not_repairable_and_says_why(server, collector, keeper):
    stream = "MAN_GONE"
    nc = await nats.connect(server.url)
    try:
        options = ProbeOptions("atomic", stream=stream, subject="man_gone.x", count=6, batch_size=6, skip_seq=3,
                               repair=True, repair_wait=30, timeout=3)
        window = SentWindow(max_messages=1)
        for batch in ("older-1", "older-2"):  # what the probe's batch is pushed out by, in a window of one message
            window.keep(batch, 1, "man_gone.x", b"p", {}, stream)
        repairer = Repairer(nc, window, collector.key, (stream,))
        await repairer.start()
        window.keep("gone-batch", 1, "man_gone.x", b"p", {}, stream)
        window.keep("newest", 1, "man_gone.x", b"p", {}, stream)
        assert "gone-batch" not in window.batches and "gone-batch" in window.published
        manifest = Manifest(manifest_id(stream, "gone-batch"), stream, "gone-batch", "atomic_abandoned",
                            (Span(1, None),), "bounded", "a test", datetime.now(timezone.utc))
        said = await repairer.repair(manifest)
        assert said.state == "not_repairable" and "no longer held" in said.why
        await repairer.stop()
        report = await run_probe(nc, options, repair_key=collector.key)  # and through the console: repaired
        assert [r.state for r in report.repairs] == ["repaired"]
    finally:
        await nc.close()


async def test_an_inferred_drop_whose_unacked_messages_were_stored_is_repaired_not_partly(server, collector, keeper):
    """A fast batch acked to 10 whose publisher sends 11..13 and goes silent: the server stored them, the console
    can only infer the drop from 11 on. The copies are dropped as duplicates; the originals make it whole."""
    stream = "MAN_INFERRED"
    nc = await nats.connect(server.url)
    try:
        await nc.jetstream().add_stream(name=stream, subjects=["man_inferred.>"], allow_batched=True)
        window = SentWindow()
        repairer = Repairer(nc, window, collector.key, (stream,))
        await repairer.start()
        batch = FastBatch(nc, flow=5, gap_mode=GapMode.OK, ack_timeout=3)
        for seq in range(1, 14):
            headers = {MSG_ID: f"{batch.batch_id}.{seq}"}
            window.keep(batch.batch_id, seq, "man_inferred.x", b"p", headers, stream)
            await batch.add("man_inferred.x", b"p", headers)
        await nc.flush()
        window.lost(batch.batch_id, Span(batch.ack_seq + 1, None))  # as a publisher whose ack never came says
        window.settle(batch.batch_id)
        mid = manifest_id(stream, batch.batch_id)
        await eventually(holds(lambda: mid in keeper.manifests), timeout=30, what="the inferred drop's manifest")
        assert keeper.manifests[mid].certainty == "inferred"
        await eventually(holds(lambda: keeper.manifests[mid].state not in ("open", "resent")), timeout=40,
                         what="the console's verdict")
        manifest = keeper.manifests[mid]
        assert manifest.state == "repaired", manifest
        ids = [h.get(MSG_ID) for _, h in await stored(nc, stream)]
        assert sorted(ids) == sorted(f"{batch.batch_id}.{s}" for s in range(1, 14))  # each once, none copied
        await repairer.stop()
    finally:
        await nc.close()


async def test_the_cli_lists_each_manifest_with_its_repair_as_json_and_as_a_table(server, collector, keeper):
    stream = "MAN_CLI"
    nc = await nats.connect(server.url)
    try:
        report = await run_probe(nc, ProbeOptions("fast", stream=stream, subject="man_cli.x", count=20, flow=2,
                                                  gap_mode=GapMode.OK, skip_seq=7, repair=True, timeout=3),
                                 repair_key=collector.key)
        assert [r.state for r in report.repairs] == ["repaired"]
    finally:
        await nc.close()

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, "manifests", *args, "--server", server.url, "--data-dir", str(collector.data_dir)],
                              capture_output=True, text=True, timeout=120)

    listed = cli("--stream", stream, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    [m] = json.loads(listed.stdout)
    assert (m["stream"], m["batch"], m["kind"], m["missing"], m["state"]) == (
        stream, report.batch_ids[0], "fast_gap", [[7, 7]], "repaired")
    assert set(m) >= {"publisher", "why", "certainty", "rests_on", "resent", "found"}
    table = cli("--stream", stream)
    assert f"{report.batch_ids[0]}" in table.stdout and " 7 " in table.stdout and "repaired" in table.stdout
    exported = cli("--stream", stream, "--format", "csv").stdout.splitlines()
    assert exported[0].startswith("# filters") and exported[1].startswith("time,stream,batch,publisher,kind,missing,")
    [row] = list(csv.DictReader(exported[1:]))
    assert (row["batch"], row["missing"], row["state"], row["found"]) == (report.batch_ids[0], "7", "repaired", "7")
    [line] = [json.loads(x) for x in cli("--stream", stream, "--format", "jsonl").stdout.splitlines()[1:]]
    assert line["missing"] == "7" and line["kind"] == "fast_gap"
    refused = cli("--stream", "a.b")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert cli("--since", "soon").returncode != 0


async def test_a_keeper_that_starts_after_a_loss_writes_its_manifest_once_and_a_restart_writes_none_again(
        server, collector):
    nc = await nats.connect(server.url)
    log = EventLog.over(nc, collector.log)
    try:
        report = await run_probe(nc, ProbeOptions("fast", stream="MAN_LATE", subject="man_late.x", count=10, flow=2,
                                                  gap_mode=GapMode.OK, skip_seq=4, timeout=3))
        batch = report.batch_ids[0]

        async def records() -> list:
            since = datetime.now(timezone.utc) - timedelta(minutes=5)
            return [e for _, e in await log.window(since, datetime.now(timezone.utc), "manifest.>", idle_timeout=0.5)
                    if e.batch_id == batch]

        async def keep_once() -> ManifestKeeper:
            keeper = ManifestKeeper(nc, log)
            stop = asyncio.Event()
            task = asyncio.create_task(keeper.run(stop))
            await eventually(holds(lambda: keeper.caught_up), what="caught up")
            stop.set()
            await task
            return keeper

        # the loss is in the log before any keeper runs (the alerts part was down): the first writes it
        await eventually(lambda: _has_gap(log, batch), what="the collector's gap event")
        first = await keep_once()
        assert first.manifests[manifest_id("MAN_LATE", batch)].missing == (Span(4, 4),)
        assert [e.reason for e in await records()] == ["open"]
        await keep_once()  # started again: it reads its own record, and writes nothing twice
        assert [e.reason for e in await records()] == ["open"]
    finally:
        await nc.close()


async def _has_gap(log: EventLog, batch: str) -> bool:
    since = datetime.now(timezone.utc) - timedelta(minutes=5)
    return any(e.batch_id == batch for _, e in await log.window(since, datetime.now(timezone.utc), "fast_gap.>",
                                                                 idle_timeout=0.5))


@pytest.mark.parametrize("gap_mode", ["ok", "fail"])
async def test_a_publisher_ahead_of_its_flow_acks_has_its_refused_messages_named_exactly_and_said_once_a_run(
        tmp_path, gap_mode):
    """A publisher that never waits for its flow acks fills the server's queue (`max_buffered_msgs: 50`): each
    message past it is refused with a 429 10167 on its own reply, then a gap ack names the run. The tracker says
    each run once, not each refusal, and the manifest names exactly what the refusals and the end lost."""
    with EmbeddedServer(tmp_path / "nats", batch_limits=TEST_LIMITS, jetstream_config="max_buffered_msgs: 50") as busy:
        nc = await nats.connect(busy.url)
        try:
            await nc.jetstream().add_stream(name="OVER", subjects=["over.>"], allow_batched=True)
            replies: list[tuple[str, bytes]] = []

            async def heard(msg):
                replies.append((msg.subject, msg.data))

            publisher = RawFast(nc, "over.x", flow=10, gap=gap_mode)
            publisher.sub = await nc.subscribe(f"{publisher.prefix}.{publisher.batch_id}.>", cb=heard)
            total = 3000
            await publisher.send(1, 0)
            for seq in range(2, total):
                await publisher.send(seq)
            await publisher.send(total, 2)
            await nc.flush()
            ended = (lambda: any(b'"batch"' in d or (b"10167" in d and s.endswith(f".{total}.2.$FI"))
                                 for s, d in replies))
            await eventually(holds(ended), timeout=30, what="the batch's end")
            refused = {int(s.split(".")[-3]) for s, d in replies if b"10167" in d}
            assert refused, "the server kept up: no message was refused (max_buffered_msgs not applied?)"
            tracker = FastBatchTracker(batch_timeout=1.0)
            now = datetime.now(timezone.utc)
            events = [e for s, d in replies for e in tracker.observe(s, d, now)]
            events += tracker.tick(now + timedelta(seconds=1.5))  # a refused commit's tail, once the replies are in
            said = [e for e in events if e.kind is EventKind.FAST_ERROR and e.err_code == 10167]
            assert 1 <= len(said) <= 1 + MAX_TAIL_RUNS < len(refused)  # the first, and a refused commit's tail
            stored = (await nc.jetstream().stream_info("OVER")).state.messages
            manifest = manifest_of([replace(e, stream=e.stream or "OVER") for e in events])
            missing = {s for span in manifest.missing for s in span.seqs(total)}
            if gap_mode == "ok":  # each refusal named, nothing more: what the stream holds is the rest
                assert missing == refused and manifest.certainty == "exact"
                assert stored == total - len(refused)
            else:  # the batch ended at its first gap: everything from it on, as the PubAck's count says
                assert missing == set(range(stored + 1, total + 1)) and min(refused) > stored
        finally:
            await nc.close()
