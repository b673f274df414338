"""`check --systems FILE`: every NATS system of the file checked at once, each finding naming its
system; a system that cannot be reached is said (Nagios unknown) and the others are reported all the
same; a wrong systems file is refused with its line before anything is asked, and no secret of it is
printed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.server import EmbeddedServer
from tests.processes import CLI, free_port

SECRET = "hunter2-SYSTEMS"


@pytest.fixture(scope="module")
def two_systems(tmp_path_factory):
    """Two independent servers: on `eu` a stream whose duplicate window is shorter than the batch
    timeout (BATCH_005), on `us` a quiet one."""
    base = tmp_path_factory.mktemp("fleet")
    with EmbeddedServer(base / "eu") as eu, EmbeddedServer(base / "us") as us:
        async def streams() -> None:
            for server, config in ((eu, StreamConfig(name="FL_DUP", subjects=["fl_dup.>"], allow_atomic=True,
                                                     duplicate_window=0.5)),
                                   (us, StreamConfig(name="FL_QUIET", subjects=["fl_quiet.>"], allow_atomic=True))):
                nc = await nats.connect(server.url)
                await nc.jetstream().add_stream(config)
                await nc.close()

        asyncio.run(streams())
        yield base, eu, us


def systems_file(base: Path, text: str) -> Path:
    path = base / f"systems-{abs(hash(text))}.toml"
    path.write_text(text)
    return path


def check(base: Path, systems: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "check", "--systems", str(systems), "--data-dir", str(base / "data"), *args],
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, "BATCH_CONSOLE_CONNECT_TIMEOUT": "2"})


def test_every_system_is_checked_and_each_finding_names_its_system(two_systems):
    base, eu, us = two_systems
    systems = systems_file(base, f'[[system]]\nname = "eu"\nservers = ["{eu.url}"]\n\n'
                                 f'[[system]]\nname = "us"\nservers = ["{us.url}"]\n')
    done = check(base, systems, "--format", "json")
    report = json.loads(done.stdout)
    dup = [f for f in report["findings"] if f["code"] == "BATCH_005"]
    assert [(f["system"], f["stream"]) for f in dup] == [("eu", "FL_DUP")], report["findings"]
    assert all(f["system"] in ("eu", "us") for f in report["findings"])
    assert "unreachable" not in report and done.returncode == 1  # a warning, on one system
    text = check(base, systems).stdout
    assert "BATCH_005 a duplicate window shorter than the batch timeout [system eu] [FL_DUP]" in text


def test_a_system_that_cannot_be_reached_is_unknown_and_the_others_are_reported(two_systems):
    base, eu, _ = two_systems
    systems = systems_file(base, f'[[system]]\nname = "eu"\nservers = ["{eu.url}"]\n\n'
                                 f'[[system]]\nname = "gone"\nservers = ["nats://127.0.0.1:{free_port()}"]\n'
                                 f'user = "u"\npassword = "{SECRET}"\n')
    done = check(base, systems, "--format", "nagios")
    assert done.returncode == 3, done.stdout  # unknown outranks the warning: a system is not seen at all
    first, *rest = done.stdout.splitlines()
    assert first.startswith("BATCH UNKNOWN - ") and "unreachable=1" in first
    assert any(line.startswith("UNKNOWN system gone: not checked") for line in rest)
    assert any("BATCH_005 [system eu] [FL_DUP]" in line for line in rest)
    assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("text, said", [
    ('[[system]]\nname = "a"\nservers = ["nats://h:1"]\n[[system]]\nname = "a"\nservers = ["nats://h:2"]\n',
     "line 4: system 'a' is named twice"),
    ('[[system]]\nname = "a"\nservers = ["nats://h:1"]\nsecret = "x"\n', "line 1: unknown key 'secret'"),
    ('[[system]]\nname = "a b"\nservers = ["nats://h:1"]\n', "line 1: name: letters, digits"),
    ('[[system]]\nname = "a"\nservers = ["nats://h:1"]\ncreds = "/nonexistent/a.creds"\n',
     "line 1: creds of system 'a' is not a file"),
    ('[[system]]\nname = "a"\nservers = ["nats://h:1"]\ntoken = "' + SECRET + '\\u0007"\n', "line 1: token: a text"),
    ("".join(f'[[system]]\nname = "s{i}"\nservers = ["nats://h:1"]\n' for i in range(1000)), "1000 systems"),
])
def test_a_wrong_systems_file_is_refused_with_its_line_and_nothing_is_asked(tmp_path, text, said):
    done = check(tmp_path, systems_file(tmp_path, text), "--format", "nagios")
    assert done.returncode == 3 and done.stdout.startswith("BATCH UNKNOWN - systems "), done.stdout
    assert said in done.stdout and SECRET not in done.stdout + done.stderr


def test_the_environment_names_the_systems_file_too(two_systems):
    base, eu, _ = two_systems
    systems = systems_file(base, f'[[system]]\nname = "eu"\nservers = ["{eu.url}"]\n')
    done = subprocess.run([CLI, "check", "--data-dir", str(base / "data"), "--format", "json"], capture_output=True,
                          text=True, timeout=90, env={**os.environ, "BATCH_CONSOLE_SYSTEMS": str(systems)})
    assert {f["system"] for f in json.loads(done.stdout)["findings"]} == {"eu"}


def test_prometheus_output_stays_one_systems(two_systems):
    base, eu, _ = two_systems
    done = check(base, systems_file(base, f'[[system]]\nname = "eu"\nservers = ["{eu.url}"]\n'), "--format", "prometheus")
    assert done.returncode == 3 and "--format prometheus is one system's" in done.stdout


def test_consumers_of_every_system_are_listed_each_with_its_system_and_one_not_reached_is_said(two_systems):
    base, eu, us = two_systems

    async def consumers() -> None:
        for server, stream in ((eu, "FL_DUP"), (us, "FL_QUIET")):
            nc = await nats.connect(server.url)
            await nc.jetstream().add_consumer(stream, durable_name="reader", ack_policy="explicit")
            await nc.close()

    asyncio.run(consumers())
    systems = systems_file(base, f'[[system]]\nname = "eu"\nservers = ["{eu.url}"]\n\n'
                                 f'[[system]]\nname = "us"\nservers = ["{us.url}"]\n\n'
                                 f'[[system]]\nname = "gone"\nservers = ["nats://127.0.0.1:{free_port()}"]\n'
                                 f'user = "u"\npassword = "{SECRET}"\n')
    done = subprocess.run([CLI, "consumers", "list", "--systems", str(systems), "--data-dir", str(base / "data"),
                           "--format", "json"], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "BATCH_CONSOLE_CONNECT_TIMEOUT": "2"})
    assert done.returncode == 0, done.stderr
    assert sorted((c["system"], c["stream"], c["consumer"]) for c in json.loads(done.stdout)) == [
        ("eu", "FL_DUP", "reader"), ("us", "FL_QUIET", "reader")]
    assert "unread system gone: not read" in done.stderr and SECRET not in done.stdout + done.stderr
    refused = subprocess.run([CLI, "consumers", "delete", "FL_DUP", "reader", "--systems", str(systems),
                              "--data-dir", str(base / "data")], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "acts on one system" in refused.stderr
