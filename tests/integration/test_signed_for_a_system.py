"""A signature binds the system its record was written for: an abandonment copied, headers and all, from
system alpha's event log into bravo's (any client of bravo's account may publish there) is refused on bravo
as not its collector's, counted, and raises nothing there; on alpha it stands."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import nats

from console.broker.server import EmbeddedServer
from console.domain.signing import SIGNATURE, SYSTEM, forgery, signature
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon, systems_text
from tests.processes import CLI
from tests.waits import collector_ready, events_for, poll_until

EVENTS = "BATCH_CONSOLE_EVENTS"


def test_a_signature_names_its_system_and_holds_only_for_it():
    key, body = b"k" * 40, b'{"event_id": "x"}'
    for_alpha = {SIGNATURE: signature(key, body, "alpha"), SYSTEM: "alpha"}
    assert forgery(key, body, for_alpha, "alpha") is None and forgery(key, body, for_alpha) is None  # any system's
    assert forgery(key, body, for_alpha, "bravo") == "forged: signed for another system"
    assert forgery(key, body, {SIGNATURE: for_alpha[SIGNATURE]}, "bravo") == "forged: bad signature"  # name stripped
    assert forgery(key, body, {**for_alpha, SYSTEM: "bravo"}, "bravo") == "forged: bad signature"  # name changed
    assert forgery(key, body, {SIGNATURE: signature(key, body)}, "bravo") is None  # signed for no system: as before
    for hostile in ("", "x" * 65):
        assert forgery(key, body, {**for_alpha, SYSTEM: hostile}, "alpha") == "forged: a system name that is none"


async def test_a_record_copied_from_another_systems_log_is_refused_there(tmp_path):
    with EmbeddedServer(tmp_path / "alpha", batch_limits=TEST_LIMITS) as alpha, \
            EmbeddedServer(tmp_path / "bravo", batch_limits=TEST_LIMITS) as bravo:
        systems = tmp_path / "systems.toml"
        systems.write_text(systems_text(alpha=alpha.url, bravo=bravo.url))
        data, log = tmp_path / "data", tmp_path / "collect.log"
        with open(log, "w") as err:
            proc = subprocess.Popen([CLI, "collect", "--systems", str(systems), "--batch-timeout", "1",
                                     "--data-dir", str(data)], stderr=err)
        try:
            poll_until(lambda: log.read_text().count("collecting into") >= 2, 60, "both systems collected")
            a, b = await nats.connect(alpha.url), await nats.connect(bravo.url)
            await collector_ready(a.jetstream(), proc)
            await collector_ready(b.jetstream(), proc)
            await abandon(a, "SIGNED_A", "signed-for-alpha")
            await events_for(a, {"signed-for-alpha"}, bool, timeout=30)
            js_a, js_b = a.jetstream(), b.jetstream()
            copied = 0
            for seq in range(1, (await js_a.stream_info(EVENTS)).state.last_seq + 1):
                stored = await js_a.get_msg(EVENTS, seq)
                if b"signed-for-alpha" in (stored.data or b""):
                    await js_b.publish(stored.subject, stored.data, headers=dict(stored.headers or {}), stream=EVENTS)
                    copied += 1
            assert copied
            await a.close()
            await b.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        done = subprocess.run([CLI, "check", "--systems", str(systems), "--data-dir", str(data), "--format", "json"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "BATCH_CONSOLE_CONNECT_TIMEOUT": "2"})
        report = json.loads(done.stdout)
        timeouts = {f["system"] for f in report["findings"] if f["code"] == "BATCH_006"}
        assert timeouts == {"alpha"}, report["findings"]  # the copy raises nothing on bravo
