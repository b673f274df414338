"""Every setting has an environment twin: commands and notebooks configured by the environment alone
(here a token server, with no flag naming the server or the token)."""

import json
import os
import signal
import subprocess

import pytest

from console.broker.server import EmbeddedServer
from console.config import event_key
from console.widgets import NotebookConsole
from tests.processes import CLI
from tests.waits import poll_until

TOKEN = "env-only-token-4711"


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    store = tmp_path_factory.mktemp("token-server") / "nats"
    with EmbeddedServer(store, extra_config=f'authorization {{ token: "{TOKEN}" }}') as server:
        yield server


def environment(server, data_dir, **more) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BATCH_CONSOLE_")}
    return {**clean, "BATCH_CONSOLE_SERVER": server.url, "BATCH_CONSOLE_TOKEN": TOKEN,
            "BATCH_CONSOLE_DATA_DIR": str(data_dir), **more}


def test_probe_takes_its_server_and_token_from_the_environment(token_server, tmp_path):
    env = environment(token_server, tmp_path)
    command = [CLI, "probe", "atomic", "--count", "10", "--batch-size", "10", "--stream", "ENV_PROBE",
               "--subject", "env.probe", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["batches_committed"] == 1
    env.pop("BATCH_CONSOLE_TOKEN")  # the token in the environment is what let it in
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    said = refused.stderr.splitlines()[-1]
    assert refused.returncode == 2 and said.startswith(f"batch-console: cannot reach NATS at {token_server.url}"), said
    assert TOKEN not in done.stderr + refused.stderr


def test_collect_runs_on_the_environment_alone(token_server, tmp_path):
    log = tmp_path / "collect.log"
    env = environment(token_server, tmp_path, BATCH_CONSOLE_EVENTS_STREAM="ENV_EVENTS", BATCH_CONSOLE_CPU="normal")
    with open(log, "w") as out:
        collect = subprocess.Popen([CLI, "collect"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: "collecting into ENV_EVENTS" in log.read_text() or collect.poll() is not None, 60,
                   "the collector did not start")
        assert collect.poll() is None, log.read_text()
        assert (tmp_path / "event.key").exists()  # its data directory came from the environment too
    finally:
        collect.send_signal(signal.SIGTERM)
        assert collect.wait(timeout=30) == 0, log.read_text()
    assert TOKEN not in log.read_text()


async def test_a_notebook_console_opens_on_the_environment_alone(token_server, tmp_path, monkeypatch):
    for name, value in environment(token_server, tmp_path).items():
        monkeypatch.setenv(name, value)
    event_key(data_dir=tmp_path)  # a collector has run on this data directory
    console = await NotebookConsole.open()
    try:
        assert console.runtime.nc.is_connected
        assert console.data_dir == tmp_path
        await console.streams()  # a JetStream request on the token connection
    finally:
        await console.close()
