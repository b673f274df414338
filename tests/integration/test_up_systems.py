"""`up --systems FILE`: no embedded server; every part runs over the file's systems (the collector, the
web console, the analytics job and the alerts part each over all of them), and Ctrl-C stops them all."""

from __future__ import annotations

import signal
import subprocess

import nats

from console.broker.server import EmbeddedServer
from tests.conftest import TEST_LIMITS
from tests.fleet import abandon, metrics_text, systems_text
from tests.processes import CLI, free_port, wait_http
from tests.waits import collector_ready, poll_until



async def test_up_runs_every_part_over_every_system(tmp_path):
    with EmbeddedServer(tmp_path / "eu", batch_limits=TEST_LIMITS) as eu, \
            EmbeddedServer(tmp_path / "us", batch_limits=TEST_LIMITS) as us:
        systems, data = tmp_path / "systems.toml", tmp_path / "data"
        systems.write_text(systems_text(eu=eu.url, us=us.url))
        port, metrics_port = free_port(), free_port()
        out = tmp_path / "up.out"
        proc = subprocess.Popen([CLI, "up", "--systems", str(systems), "--data-dir", str(data), "--port", str(port),
                                 "--metrics-port", str(metrics_port), "--batch-timeout", "1", "--analytics-every", "5"],
                                stdout=open(out, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_http(f"http://127.0.0.1:{port}/?system=us", proc, out, timeout=120)
            for name, server in (("eu", eu), ("us", us)):
                nc = await nats.connect(server.url)
                await collector_ready(nc.jetstream(), proc)
                await abandon(nc, f"UP_{name.upper()}", f"up-{name}")
                await nc.close()
            metrics = f"http://127.0.0.1:{metrics_port}/metrics"
            for name in ("eu", "us"):
                sample = f'batch_console_lost_batches_total{{system="{name}",stream="UP_{name.upper()}"'
                poll_until(lambda: sample in metrics_text(metrics), 90, lambda: out.read_text()[-2000:])
            poll_until(lambda: all((data / "logs" / "analytics.log").read_text().count(f"analytics: system {n}: ")
                                   for n in ("eu", "us")), 180, "no analytics run over both systems")
            said = out.read_text()
            assert "[up] nats:" not in said and "(systems eu, us; Ctrl-C" in said, said  # no embedded server
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
        assert code == 0, out.read_text()[-3000:]
