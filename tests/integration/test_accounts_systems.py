"""A system with more accounts ([[system.account]]): each account is watched as SYSTEM/ACCOUNT, with its
own collector and event log in its own account's JetStream. The system account sends every account's
copy of an advisory to every collector of the system: each keeps its own account's only, so a loss is
recorded once, verified, in the log of the account it happened in."""

from __future__ import annotations

import json
import signal
import subprocess

import nats
import pytest

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon
from tests.processes import CLI
from tests.waits import collector_ready, events_for

ACCOUNTS = """
accounts {
  APP1 { jetstream: enabled, users: [{user: app1, password: app1-secret}] }
  APP2 { jetstream: enabled, users: [{user: app2, password: app2-secret}] }
  SYS { users: [{user: sys, password: sys-secret}] }
}
system_account: SYS
"""


def _systems(url: str) -> str:
    return (f'[[system]]\nname = "acc"\nservers = ["{url}"]\nuser = "app1"\npassword = "app1-secret"\n'
            'system_user = "sys"\nsystem_password = "sys-secret"\n'
            '[[system.account]]\nname = "APP2"\nuser = "app2"\npassword = "app2-secret"\n')


@pytest.fixture(scope="module")
def accounts_server(tmp_path_factory):
    with EmbeddedServer(tmp_path_factory.mktemp("accounts"), batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as s:
        yield s


async def test_each_accounts_loss_is_recorded_once_verified_in_its_own_accounts_log(accounts_server, tmp_path):
    systems = tmp_path / "systems.toml"
    systems.write_text(_systems(accounts_server.url))
    log = tmp_path / "collect.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([CLI, "collect", "--systems", str(systems), "--batch-timeout", "1",
                                 "--data-dir", str(tmp_path / "data")], stderr=err)
    clients = {}
    try:
        for account in ("app1", "app2"):
            clients[account] = nc = await nats.connect(accounts_server.url, user=account, password=f"{account}-secret")
            await collector_ready(nc.jetstream(), proc)
        for account, nc in clients.items():
            await abandon(nc, f"ACC_{account.upper()}", f"acc-{account}")
        for account, nc in clients.items():
            found = await events_for(nc, {"acc-app1", "acc-app2"}, lambda es: len(es) > 0, timeout=30)
            assert [(e.batch_id, e.source, e.unverified) for e in found] == [(f"acc-{account}", "system_advisory", False)]
        checked = subprocess.run([CLI, "check", "--systems", str(systems), "--format", "json",
                                  "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=120)
        assert checked.returncode in (0, 1, 2), checked.stderr[-2000:]
        report = json.loads(checked.stdout)  # each account checked as a system: its abandonment its finding
        assert "unreachable" not in report and {f["system"] for f in report["findings"]} == {"acc", "acc/APP2"}, report
        assert {(f["system"], f["stream"]) for f in report["findings"] if f["stream"] and f["stream"].startswith("ACC_")} \
            == {("acc", "ACC_APP1"), ("acc/APP2", "ACC_APP2")}, report
    finally:
        for nc in clients.values():
            await nc.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == 0 and "system acc: collecting into" in text and "system acc/APP2: collecting into" in text, text[-3000:]
    assert "app2-secret" not in text and "sys-secret" not in text
