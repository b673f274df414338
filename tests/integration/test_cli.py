"""`batch-console server` and `batch-console probe ... --json`, run as a user runs them."""

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [str(Path(sys.executable).parent / "batch-console")]


@pytest.fixture(scope="module")
def cli_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("cli")
    with open(data / "stderr.log", "w") as err:
        proc = subprocess.Popen(
            CLI + ["server", "--port", "0", "--data-dir", str(data), "--batch-timeout", "1"],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )
    first_line = proc.stdout.readline()  # blocks until the server says it is ready (or exits)
    match = re.search(r"nats://[\d.]+:\d+", first_line)
    assert match, f"server did not start: {first_line!r} {(data / 'stderr.log').read_text()}"
    yield match.group(0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def probe(url, *args):
    done = subprocess.run(CLI + ["probe", *args, "--server", url, "--json"], capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_fast_probe_commits_every_message(cli_server):
    code, report = probe(cli_server, "fast", "--count", "5000", "--flow", "50", "--stream", "CLI_FAST", "--subject", "cli.fast")
    assert code == 0 and report["error"] is None and report["stream_created"] is True
    assert report["messages_sent"] == 5000 and report["puback"]["count"] == 5000
    assert report["acks"] >= 100 and report["msgs_per_s"] > 0


def test_atomic_probe_splits_the_count_into_batches(cli_server):
    code, report = probe(cli_server, "atomic", "--count", "250", "--batch-size", "100", "--stream", "CLI_ATOMIC", "--subject", "cli.atomic")
    assert code == 0 and report["batches_committed"] == 3 and len(report["batch_ids"]) == 3
    assert report["messages_sent"] == 250 and report["puback"]["count"] == 50


def test_atomic_probe_with_eob(cli_server):
    code, report = probe(cli_server, "atomic", "--count", "20", "--batch-size", "10", "--eob", "--stream", "CLI_ATOMIC", "--subject", "cli.atomic")
    assert code == 0 and report["puback"]["count"] == 10 and report["messages_sent"] == 20


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_injected_gap_shows_with_its_lost_count_in_both_modes(cli_server, mode):
    code, report = probe(
        cli_server, "fast", "--count", "100", "--flow", "10", "--skip-seq", "37", "--gap-mode", mode,
        "--stream", "CLI_GAPS", "--subject", "cli.gaps",
    )
    assert code == 0
    assert report["gaps"] == [{"first_lost_seq": 37, "seq": 38, "lost": 1}] and report["lost"] == 1
    if mode == "ok":
        assert report["error"] is None and report["puback"]["count"] == 100  # server counts the lost one too
    else:
        assert report["error"]["type"] == "BatchEndedError" and report["puback"]["count"] == 36


def test_atomic_gap_is_refused_as_incomplete(cli_server):
    code, report = probe(cli_server, "atomic", "--count", "10", "--batch-size", "10", "--skip-seq", "4", "--stream", "CLI_ATOMIC", "--subject", "cli.atomic")
    assert code == 0 and report["error"]["err_code"] == 10176


def test_abandon_leaves_the_last_batch_open(cli_server):
    code, report = probe(cli_server, "atomic", "--count", "10", "--batch-size", "5", "--abandon", "--stream", "CLI_ATOMIC", "--subject", "cli.atomic")
    assert code == 0 and report["batches_committed"] == 1 and report["abandoned_batch"] == report["batch_ids"][1]


@pytest.mark.parametrize("command", [["probe", "fast"], ["analytics", "--once"]])
def test_unreachable_server_is_one_line_naming_it_and_exit_2(command, tmp_path):
    done = subprocess.run(CLI + [*command, "--server", "nats://127.0.0.1:1"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "batch-console: cannot reach NATS at nats://127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr


async def test_collect_stores_an_abandonment_and_stops_cleanly_on_sigterm(cli_server, tmp_path):
    import nats

    from console.broker.atomic import AtomicBatch
    from tests.waits import collector_ready, events_for

    with open(tmp_path / "collect.log", "w") as err:
        proc = subprocess.Popen(CLI + ["collect", "--server", cli_server, "--batch-timeout", "1", "--data-dir", str(tmp_path)],
                                stderr=err)
    nc = await nats.connect(cli_server)
    try:
        js = nc.jetstream()
        await js.add_stream(name="CLI_COLLECT", subjects=["cli.collect"], allow_atomic=True)
        await collector_ready(js, proc)
        batch = AtomicBatch(nc, batch_id="cli-collect")
        await batch.add("cli.collect", b"x")
        batch.discard()
        await events_for(nc, {"cli-collect"}, bool, timeout=30)
    finally:
        await nc.close()
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert "collector stopped" in (tmp_path / "collect.log").read_text()


async def test_collect_stops_on_sigterm_right_after_a_fast_batch_and_keeps_its_events(cli_server, tmp_path):
    """SIGTERM while the append of the batch's last events waits for its PubAck: nats-py can
    swallow a task's cancellation there, which once left the collector waiting for ever. It must
    exit, and first handle the replies the server sent and store their events."""
    import asyncio

    import nats

    from console.broker.eventlog import EventLog
    from console.broker.fast import FastBatch
    from console.domain.events import EventKind
    from tests.waits import wait_until

    log_path = tmp_path / "collect.log"
    with open(log_path, "w") as err:
        proc = subprocess.Popen(CLI + ["collect", "--server", cli_server, "--data-dir", str(tmp_path)], stderr=err)
    nc = await nats.connect(cli_server)
    try:
        js = nc.jetstream()
        await js.add_stream(name="CLI_FAST_STOP", subjects=["cli.fast.stop"], allow_batched=True)
        await wait_until(lambda: "collecting into" in log_path.read_text() or proc.poll() is not None, timeout=30)
        committed = asyncio.Event()

        async def on_committed(_):
            committed.set()

        # Seen as the log stores it, before the collector has its PubAck: the append is in flight.
        await nc.subscribe(f"batch_console.events.{EventKind.FAST_COMMITTED.value}.>", cb=on_committed)
        batch = FastBatch(nc, flow=10)
        for _ in range(19_999):
            await batch.add("cli.fast.stop", b"x" * 64)
        await batch.commit("cli.fast.stop", b"x")
        await asyncio.wait_for(committed.wait(), 30)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0, log_path.read_text()[-2000:]
        events = [e for _, e in await EventLog(js).read(1) if e.batch_id == batch.batch_id]
    finally:
        await nc.close()
        if proc.poll() is None:
            proc.kill()
    assert "collector stopped" in log_path.read_text()
    assert [e.count for e in events if e.kind is EventKind.FAST_COMMITTED] == [20_000]
    assert sum(e.acks for e in events if e.kind is EventKind.FAST_PROGRESS) == batch.acks
