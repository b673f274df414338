"""BATCH_025 against real servers: nats-server at its default fsync policy (every 2 minutes), at
`sync_interval: always` and at 30 s, each with a batch stream; `check` says exactly what each server
does, read from its /varz; a system whose /varz cannot be read says unchecked, never fine."""

from __future__ import annotations

import json
import subprocess

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.processes import CLI


async def _batch_stream(url: str) -> None:
    async with await nats.connect(url) as nc:
        await nc.jetstream().add_stream(StreamConfig(name="DU_A", subjects=["du_a.>"], allow_atomic=True))


def _check(server: EmbeddedServer, data, *monitor: str) -> dict:
    done = subprocess.run([CLI, "check", "--server", server.url, "--data-dir", str(data), "--code", "BATCH_025",
                           "--format", "json", *monitor], capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1, 2, 3), done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("policy,said", [
    ("", "batch-console flushes to disk every 2 min"),  # the default
    ('sync_interval: "30s"', "batch-console flushes to disk every 30 s"),
    ("sync_interval: always", None),
])
async def test_each_servers_fsync_policy_is_said_as_it_is(tmp_path, policy, said):
    with EmbeddedServer(tmp_path / "nats", batch_limits=TEST_LIMITS, monitor_port=0, jetstream_config=policy) as server:
        await _batch_stream(server.url)
        report = _check(server, tmp_path, "--monitor-url", server.monitor_url)
        findings = [f for f in report["findings"] if f["code"] == "BATCH_025"]
        if said is None:
            assert findings == [] and "BATCH_025" in report["checked"], report
        else:
            [finding] = findings
            assert finding["stream"] == "DU_A" and finding["severity"] == "warning", finding  # R1: a warning
            assert said in finding["evidence"] and "Jepsen" in finding["evidence"], finding
        blind = _check(server, tmp_path)  # no monitor URL, no system account: not known
        assert [u["code"] for u in blind["unchecked"]] == ["BATCH_025"] and blind["findings"] == [], blind
