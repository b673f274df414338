"""`collect --systems FILE`: one process collects from every system of the file, each into its own
system's event log; a system that is not there yet is tried again while the others collect, and is
collected from once it comes up."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import nats
import pytest

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon, systems_text
from tests.processes import CLI, free_port
from tests.waits import collector_ready, events_for, poll_until


async def test_one_collector_captures_every_system_into_its_own_log_and_waits_for_one_that_is_down(tmp_path):
    late_port = free_port()
    with EmbeddedServer(tmp_path / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp_path / "us", batch_limits=TEST_LIMITS) as us:
        systems = tmp_path / "systems.toml"
        systems.write_text(systems_text(eu=eu.url, us=us.url, late=f"nats://127.0.0.1:{late_port}"))
        log = tmp_path / "collect.log"
        with open(log, "w") as err:
            proc = subprocess.Popen([CLI, "collect", "--systems", str(systems), "--batch-timeout", "1",
                                     "--connect-timeout", "1", "--data-dir", str(tmp_path / "data")], stderr=err)
        late = None
        try:
            poll_until(lambda: "system late: not reachable" in log.read_text(), 30, "the missing system said")
            clients = {name: await nats.connect(server.url) for name, server in (("eu", eu), ("us", us))}
            for name, nc in clients.items():
                await collector_ready(nc.jetstream(), proc)
                await abandon(nc, f"FL_{name.upper()}", f"fleet-{name}")
            for name, nc in clients.items():  # each loss in its own system's log, and only there
                found = await events_for(nc, {"fleet-eu", "fleet-us"}, lambda es: len(es) > 0, timeout=30)
                assert {e.batch_id for e in found} == {f"fleet-{name}"}
                await nc.close()
            late = EmbeddedServer(tmp_path / "late", port=late_port, batch_limits=TEST_LIMITS).start()
            poll_until(lambda: "system late: collecting into" in log.read_text(), 60, "the late system collected")
            nc = await nats.connect(late.url)
            await collector_ready(nc.jetstream(), proc)
            await abandon(nc, "FL_LATE", "fleet-late")
            assert {e.batch_id for e in await events_for(nc, {"fleet-late"}, bool, timeout=30)} == {"fleet-late"}
            await nc.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            if late is not None:
                late.stop()
        text = log.read_text()
        assert code == 0 and "collector stopped" in text, text[-3000:]
        assert all(f"system {name}: collecting into" in text for name in ("eu", "us", "late"))
        assert "the collectors run at nice 10" in text  # not in the idle class by turns


def test_a_wrong_systems_file_stops_collect_before_it_connects(tmp_path: Path):
    systems = tmp_path / "systems.toml"
    systems.write_text('[[system]]\nname = "eu"\nservers = ["nats://127.0.0.1:1"]\nname2 = 1\n')
    done = subprocess.run([CLI, "collect", "--systems", str(systems), "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "line 1: unknown key 'name2'" in done.stderr
    assert "collecting" not in done.stderr


async def test_conformance_reports_every_systems_clients_under_its_name(tmp_path):
    from console.broker.fast import FastBatch

    with EmbeddedServer(tmp_path / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp_path / "us", batch_limits=TEST_LIMITS) as us:
        both = tmp_path / "systems.toml"
        both.write_text(systems_text(eu=eu.url, us=us.url))
        gone = tmp_path / "with-gone.toml"
        gone.write_text(systems_text(eu=eu.url, us=us.url, gone=f"nats://127.0.0.1:{free_port()}"))
        data = str(tmp_path / "data")
        log = tmp_path / "collect.log"
        with open(log, "w") as err:
            proc = subprocess.Popen([CLI, "collect", "--systems", str(both), "--batch-timeout", "1",
                                     "--data-dir", data], stderr=err)
        try:
            for server in (eu, us):
                nc = await nats.connect(server.url, name="fleet-publisher")
                await collector_ready(nc.jetstream(), proc)
                await nc.jetstream().add_stream(name="FL_FAST", subjects=["fl_fast"], allow_batched=True)
                batch = FastBatch(nc, flow=10)
                for _ in range(20):
                    await batch.add("fl_fast", b"x")
                await batch.commit("fl_fast", b"x")
                await nc.close()

            def report(systems: Path) -> subprocess.CompletedProcess:
                return subprocess.run([CLI, "conformance", "--systems", str(systems), "--data-dir", data,
                                       "--format", "json", "--connect-timeout", "2"],
                                      capture_output=True, text=True, timeout=60)

            last: list[subprocess.CompletedProcess] = []

            def graded() -> subprocess.CompletedProcess | None:
                # Each system's batches reach the event log on their own; a verdict counts once both have.
                last[:] = [done := report(both)]
                if done.returncode != 0:
                    return None
                found = json.loads(done.stdout)["systems"]
                return done if all(found[s]["clients"] for s in found) else None

            def how_it_stands() -> str:
                try:
                    clients = {name: len(s["clients"]) for name, s in json.loads(last[0].stdout)["systems"].items()}
                except (IndexError, ValueError, KeyError, TypeError):
                    clients = last[0].stdout[-500:] if last else None
                return (f"no verdict on each system's clients: the last report exited {last[0].returncode if last else None}"
                        f" with clients {clients}; the collector said:\n{log.read_text()[-4000:]}")

            done = poll_until(graded, 60, how_it_stands, every=1.0)
            found = json.loads(done.stdout)["systems"]
            assert set(found) == {"eu", "us"}
            assert all(c["conforms"] for s in found for c in found[s]["clients"])
            with_gone = report(gone)
            assert with_gone.returncode == 3  # every client conforms, but one system could not be read
            assert json.loads(with_gone.stdout)["systems"]["gone"]["unreachable"].startswith("not read: ")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


async def test_audit_verifies_every_systems_trail_each_against_its_own_checkpoint(tmp_path):
    """One data directory, two systems: each trail's head is checkpointed apart, so one system's newer
    records never read as the other's erasure (a false CHAIN BROKEN)."""
    with EmbeddedServer(tmp_path / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp_path / "us", batch_limits=TEST_LIMITS) as us:
        systems = tmp_path / "systems.toml"
        systems.write_text(systems_text(eu=eu.url, us=us.url))
        data = str(tmp_path / "data")
        log = tmp_path / "collect.log"
        with open(log, "w") as err:  # the collectors make the event key that signs the trails
            proc = subprocess.Popen([CLI, "collect", "--systems", str(systems), "--data-dir", data], stderr=err)
        try:
            poll_until(lambda: log.read_text().count("collecting into") == 2, 60, "both systems collected")
            for server in (eu, us):
                nc = await nats.connect(server.url)
                await nc.jetstream().add_stream(name="FL_SEARCHED", subjects=["fl.searched"])
                await nc.close()

            def run(*args: str) -> subprocess.CompletedProcess:
                return subprocess.run([CLI, *args, "--data-dir", data], capture_output=True, text=True, timeout=120)

            def search(server: EmbeddedServer) -> None:  # an action: one record in that system's trail
                done = run("search", "FL_SEARCHED", "--server", server.url)
                assert done.returncode == 0, done.stderr

            search(eu)
            for _ in range(3):
                search(us)
            first = run("audit", "--systems", str(systems), "--verify")
            assert first.returncode == 0, first.stderr
            assert first.stderr.count("chain intact") == 2 and "== system eu ==" in first.stderr
            search(us)  # us moves on; eu's checkpoint must not be compared with us's head
            again = run("audit", "--systems", str(systems), "--verify")
            assert again.returncode == 0 and "BROKEN" not in again.stderr, again.stderr
            assert again.stdout.count("search.run") == 2 * (1 + 4), again.stdout  # attempted, then accepted
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


async def test_a_notebook_opens_one_system_of_the_file_and_sees_only_its_losses(tmp_path, monkeypatch):
    from console.config import load
    from console.errors import ConfigError
    from console.widgets import NotebookConsole, systems

    with EmbeddedServer(tmp_path / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp_path / "us", batch_limits=TEST_LIMITS) as us:
        file = tmp_path / "systems.toml"
        file.write_text(systems_text(eu=eu.url, us=us.url))
        data = tmp_path / "data"
        monkeypatch.setenv("BATCH_CONSOLE_SYSTEMS", str(file))
        monkeypatch.setenv("BATCH_CONSOLE_DATA_DIR", str(data))
        log = tmp_path / "collect.log"
        with open(log, "w") as err:
            proc = subprocess.Popen([CLI, "collect", "--batch-timeout", "1"], stderr=err)
        try:
            poll_until(lambda: log.read_text().count("collecting into") == 2, 60, "both systems collected")
            for name, server in (("eu", eu), ("us", us)):
                nc = await nats.connect(server.url)
                await abandon(nc, f"NB_{name.upper()}", f"nb-{name}")
                await events_for(nc, {f"nb-{name}"}, bool, timeout=30)
                await nc.close()
            assert systems(load()) == ["eu", "us"]
            with pytest.raises(ConfigError, match="open one of them"):
                await NotebookConsole.open()
            with pytest.raises(ConfigError, match="no system 'asia'"):
                await NotebookConsole.open(system="asia")
            console = await NotebookConsole.open(system="us")
            try:
                await console.caught_up()
                assert {b.batch_id for b in console.lost_batches()} == {"nb-us"}
            finally:
                await console.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
