"""The README's example account (assets/deploy/accounts.conf) on a real nats-server: the console's user
keeps its audit trail and event log; an application user of the same account can neither write, purge,
truncate, update nor delete them, nor forge an advisory, and the trail still verifies afterwards."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from console.broker.audit_log import STREAM, SUBJECT
from console.broker.server import EmbeddedServer
from console.config import event_key
from console.domain.audit import Actor
from console.runtime import Runtime
from console.commands import RunProbe
from tests.commands import doing
from tests.conftest import TEST_LIMITS
from tests.integration.test_audit import settings_for

ACCOUNTS = (Path(__file__).resolve().parents[2] / "assets" / "deploy" / "accounts.conf").read_text()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    with EmbeddedServer(tmp_path_factory.mktemp("deploy"), batch_limits=TEST_LIMITS, extra_config=ACCOUNTS) as s:
        yield s


async def test_other_clients_of_the_account_cannot_touch_the_trail_or_forge_input(deployed, tmp_path):
    event_key(data_dir=tmp_path)
    settings = settings_for(deployed.url, tmp_path)
    settings = replace(settings, connection=replace(settings.connection, user="console", password="console-secret"))
    console = await Runtime.open(settings)
    violations: list[str] = []

    async def on_error(e: Exception) -> None:
        violations.append(str(e))

    app = await nats.connect(deployed.url, user="app", password="app-secret", error_cb=on_error)
    try:
        for i in range(3):
            await console.actions(Actor("ann")).run(doing(RunProbe, f"S{i} atomic x1"))
        js = app.jetstream(timeout=1.0)
        config = StreamConfig(name=STREAM, subjects=[SUBJECT], max_msgs=1)
        attempts = [js.purge_stream(STREAM), js.delete_stream(STREAM), js.update_stream(config),
                    js.delete_msg(STREAM, 1), js.publish(SUBJECT, b'{"forged": true}'),
                    js.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.X", b"{}"),
                    js.delete_stream(console.settings.event_log.stream)]
        for attempt in attempts:
            with pytest.raises((nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError)):
                await attempt
        assert sum("permissions violation" in v.lower() for v in violations) >= len(attempts) - 1, violations
        checked = await console.audit.read()
        assert checked.intact and len(checked.records) == 6 and checked.unsafe is None, checked.breaks
        await app.publish("app.orders", b"the application's own subjects are its own")  # not hindered
        await app.flush()
    finally:
        await app.close()
        await console.close()
