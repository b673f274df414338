"""Canary batches on real servers: `canary --once --format json` prints one object per node and kind and
leaves no stream behind; a stream of the canary's name that it did not make is never written to; the
continuous canary writes its results to the event log, which the checks read, holds its streams to
their limits and deletes them when it stops; on a three-node cluster, a node stopped in bursts is
flagged within two canary periods while the others stay well."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess

import nats
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from console.broker.canary import CanaryRefused
from console.broker.eventlog import EventLog
from console.canary import CanaryOptions, CanaryRun, one_round
from console.domain.canary import MAX_MS, canary_result, node_health, stream_for
from console.domain.events import EventKind
from tests.conftest import CLUSTER_LIMITS
from tests.processes import CLI
from tests.waits import eventually, wait_until

KEYS = {"system", "node", "kind", "first_ack_ms", "commit_ms", "lost"}


def canary(server, *args: str, data=None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "canary", "--server", server.url, *(["--data-dir", str(data)] if data else []), *args],
                          capture_output=True, text=True, timeout=120)


async def test_once_prints_each_node_and_kind_and_leaves_no_stream(nats_server, tmp_path):
    done = canary(nats_server, "--once", "--format", "json", data=tmp_path)
    assert done.returncode == 0, done.stderr
    found = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["kind"] for r in found] == ["atomic", "fast"] and all(KEYS <= set(r) for r in found)
    assert all(r["lost"] == 0 and 0 < r["first_ack_ms"] <= r["commit_ms"] < MAX_MS for r in found)
    nc = await nats.connect(nats_server.url)
    try:
        assert {r["node"] for r in found} == {nc._server_info["server_name"]}
        with pytest.raises(nats.js.errors.NotFoundError):
            await nc.jetstream().stream_info(stream_for(found[0]["node"]))
    finally:
        await nc.close()


def test_every_system_of_a_systems_file_gets_its_canaries_and_one_away_is_said(tmp_path):
    from console.broker.cluster import free_port
    from console.broker.server import EmbeddedServer
    from tests.fleet import systems_text

    with EmbeddedServer(tmp_path / "eu") as eu, EmbeddedServer(tmp_path / "us") as us:
        both = tmp_path / "systems.toml"
        both.write_text(systems_text(eu=eu.url, us=us.url))
        done = subprocess.run([CLI, "canary", "--once", "--format", "json", "--systems", str(both), "--data-dir",
                               str(tmp_path / "data"), "--connect-timeout", "2"], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        found = [json.loads(line) for line in done.stdout.splitlines()]
        assert sorted((r["system"], r["kind"]) for r in found) == [("eu", "atomic"), ("eu", "fast"), ("us", "atomic"),
                                                                   ("us", "fast")]
        gone = tmp_path / "gone.toml"
        gone.write_text(systems_text(eu=eu.url, gone=f"nats://127.0.0.1:{free_port()}"))
        away = subprocess.run([CLI, "canary", "--once", "--format", "json", "--systems", str(gone), "--data-dir",
                               str(tmp_path / "data"), "--connect-timeout", "2"], capture_output=True, text=True,
                              timeout=120)
        assert away.returncode == 3 and "system gone: not reached" in away.stderr
        assert {json.loads(line)["system"] for line in away.stdout.splitlines()} == {"eu"}  # the others measured


async def test_a_stream_of_its_name_it_did_not_make_is_never_written_to(server, tmp_path):
    nc = await nats.connect(server.url)
    try:
        name = stream_for(nc._server_info["server_name"])
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=["someone.elses"]))
        await nc.jetstream().publish("someone.elses", b"theirs")
        done = canary(server, "--once", data=tmp_path)
        assert done.returncode != 0 and "the canary did not make it" in done.stderr
        info = await nc.jetstream().stream_info(name)
        assert info.state.messages == 1 and info.config.subjects == ["someone.elses"]  # untouched, and kept
        with pytest.raises(CanaryRefused):
            await one_round(nc, CanaryOptions(), CanaryRun())
        await nc.jetstream().delete_stream(name)
    finally:
        await nc.close()


TAMPERINGS = {"allow_atomic off": dict(allow_atomic=False), "a tiny max_msg_size": dict(max_msg_size=1),
              "sealed": dict(sealed=True), "another subject": dict(subjects=["not.the.canary"])}


@pytest.mark.parametrize("how", [*TAMPERINGS, "deleted"])
async def test_a_canary_stream_changed_by_someone_else_is_tampering_never_a_failing_node(server, how):
    """Any client of the account can change the canary's stream: its batches then fail, and BATCH_032 paged
    critical for a healthy node. They are said as tampering now (BATCH_033), and the stream put back."""
    from dataclasses import replace

    from console.domain.checks import CHECKS, Facts, evaluate

    nc = await nats.connect(server.url)
    run = CanaryRun()
    try:
        node = nc._server_info["server_name"]
        first = await one_round(nc, CanaryOptions(), run)
        assert [r.failed for r in first] == [False, False] and all(r.tampered is None for r in first)
        js, name = nc.jetstream(), stream_for(node)
        if how == "deleted":
            await js.delete_stream(name)
        else:
            await js.update_stream(replace((await js.stream_info(name)).config, **TAMPERINGS[how]))
        hit = await one_round(nc, CanaryOptions(), run)
        assert hit[0].tampered is not None and not any(r.failed for r in hit), hit
        health = node_health(hit)
        assert health[0].failed == 0 and health[0].tampering() is not None
        report = evaluate(Facts(canaries=tuple(hit)), codes=("BATCH_032", "BATCH_033"))
        assert {f.code for f in report.findings} == {"BATCH_033"}, report.findings
        assert CHECKS["BATCH_033"].severity == "warning"
        if how != "deleted":  # put back where it still bears the canary's mark; a deleted one is made again
            config = (await js.stream_info(name)).config
            assert config.allow_atomic and not config.sealed and config.subjects == [f"_batch_console.canary.{node}.>"]
        run.nodes = {}  # looked for again: a deleted stream is made again
        again = await one_round(nc, CanaryOptions(), run)
        assert [r.failed for r in again] == [False, False] and all(r.tampered is None for r in again), again
    finally:
        for made in run.made.get(None, []):
            try:
                await nc.jetstream().delete_stream(made)
            except nats.js.errors.NotFoundError:
                pass
        await nc.close()


async def test_a_canary_batch_refused_for_others_batches_on_its_stream_is_tampering(server):
    """Another client's fast batches on the canary's own subject fill the stream's in-flight limit (5 here):
    the canary's fast batch is refused, and that says nothing of the node."""
    from console.broker.fast import FastBatch
    from console.domain.canary import subject_for

    nc = await nats.connect(server.url)
    run = CanaryRun()
    theirs: list[FastBatch] = []
    try:
        node = nc._server_info["server_name"]
        assert not any(r.failed for r in await one_round(nc, CanaryOptions(), run))
        for _ in range(5):
            batch = FastBatch(nc, flow=100)
            await batch.add(f"{subject_for(node)}.theirs", b"x")
            theirs.append(batch)
        hit = await one_round(nc, CanaryOptions(timeout=2.0), run)
        fast = next(r for r in hit if r.kind == "fast")
        assert fast.error and fast.tampered and "refused for batches others hold open" in fast.tampered, fast
        assert not any(r.failed for r in hit) and node_health(hit)[0].failed == 0
    finally:
        for batch in theirs:
            await batch.close()
        for made in run.made.get(None, []):
            await nc.jetstream().delete_stream(made)
        await nc.close()


async def test_the_continuous_canary_logs_its_results_keeps_to_its_limits_and_cleans_up(server, tmp_path):
    proc = subprocess.Popen([CLI, "canary", "--server", server.url, "--data-dir", str(tmp_path), "--every", "1",
                             "--messages", "100"], stdout=subprocess.PIPE, stderr=open(tmp_path / "canary.log", "w"),
                            text=True)
    nc = await nats.connect(server.url)
    try:
        node = nc._server_info["server_name"]
        await wait_until(lambda: (tmp_path / "event.key").exists(), what="the canary's event key")
        log = EventLog.over(nc, _keyed(tmp_path))

        async def results():
            return [canary_result(e) for _, e in await log.read(1, idle_timeout=0.3) if e.kind is EventKind.CANARY]

        found = await eventually(results, lambda rs: len(rs) >= 12, timeout=90, what="six rounds in the event log")
        assert {(r.node, r.kind) for r in found} == {(node, "atomic"), (node, "fast")}
        assert [h.failed for h in node_health(found)] == [0]
        info = await nc.jetstream().stream_info(stream_for(node))
        assert info.state.messages <= 1000 < 6 * 2 * 100  # its limits hold it, not a cleanup
        checked = subprocess.run([CLI, "check", "--server", server.url, "--data-dir", str(tmp_path), "--code",
                                  "BATCH_032", "--format", "json"], capture_output=True, text=True, timeout=120)
        assert "BATCH_032" in json.loads(checked.stdout)["checked"], checked.stdout
        from console.widgets import NotebookConsole  # the notebook's view of the same results

        console = await NotebookConsole.connect(server.url, data_dir=tmp_path)
        try:
            seen = await console.canaries()
            assert {(r.node, r.kind) for _, r in seen} == {(node, "atomic"), (node, "fast")}
        finally:
            await console.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    try:
        with pytest.raises(nats.js.errors.NotFoundError):
            await nc.jetstream().stream_info(stream_for(node))
    finally:
        await nc.close()


def _keyed(data):
    from console.config import EventLogSettings, event_key

    return EventLogSettings(key=event_key(data_dir=data))


@pytest.mark.cluster
async def test_a_node_stopped_in_bursts_is_flagged_within_two_periods_and_the_others_are_not(cluster):
    # the canary's connection on the nodes that stay up: stopped, its own server would fail every node
    nc = await nats.connect([cluster.urls[0], cluster.urls[2]], max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    options = CanaryOptions(messages=10, timeout=CLUSTER_LIMITS.timeout / 2, every=2.0)
    run = CanaryRun()
    try:
        for _ in range(5):  # a healthy cluster: no node flagged, round after round
            healthy = await one_round(nc, options, run)
            assert sorted({r.node for r in healthy}) == ["n1", "n2", "n3"]
            assert [h.node for h in node_health(healthy) if h.finding(1000.0) is not None] == [], healthy
        victim = cluster.node("n2")
        flagged = None
        for period in range(2):
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                results = await one_round(nc, options, run)
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            sick = {h.node for h in node_health(results) if h.finding(1000.0) is not None}
            if "n2" in sick:
                flagged = period + 1
                break
            await asyncio.sleep(options.every)
        assert flagged is not None, "n2 not flagged within two canary periods"
        assert sick == {"n2"}, results  # the others well
    finally:
        from console.broker.canary import delete_streams

        await delete_streams(nc, run.made.get(None, []))
        await nc.close()
