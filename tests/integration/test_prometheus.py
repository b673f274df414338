"""A real Prometheus (Debian's package) scrapes the alerts service's /metrics, and promtool checks the
shipped alerting rules, which follow the console's own rule set."""

import asyncio
import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from console.alerting.metrics import Metrics, serve_metrics
from console.alerting.service import DEFAULT_RULES, AlertService
from console.broker.atomic import AtomicBatch
from console.collector.collector import Collector
from console.config import CollectorSettings, EventLogSettings
from console.domain.alert_rules import parse_rules
from console.errors import BatchError
from tests.conftest import TEST_LIMITS
from tests.processes import free_port
from tests.waits import eventually, wait_until

ASSETS = Path(__file__).resolve().parents[2] / "assets"
needs_prometheus = pytest.mark.skipif(not shutil.which("prometheus"), reason="scripts/test.sh installs prometheus")


@needs_prometheus
def test_promtool_accepts_the_shipped_alerting_rules_and_they_follow_the_consoles_own():
    done = subprocess.run(["promtool", "check", "rules", str(ASSETS / "prometheus-rules.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = parse_rules(DEFAULT_RULES.read_text())
    alerts = re.findall(r"summary: \"(.+) on \{\{", (ASSETS / "prometheus-rules.yml").read_text())
    assert alerts == [rule.name for rule in shipped]
    json.loads((ASSETS / "grafana-dashboard.json").read_text())  # the dashboard is valid JSON


def query(port: int, promql: str) -> list:
    """The result of an instant query; empty while Prometheus is not up yet."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.load(reply)["data"]["result"]
    except OSError:
        return []


@needs_prometheus
async def test_prometheus_scrapes_the_lost_batches_after_real_abandonments(server, tmp_path):
    conn = await nats.connect(server.url)
    await conn.jetstream().add_stream(StreamConfig(name="PROM", subjects=["prom.>"], allow_atomic=True))
    collector = Collector(conn, CollectorSettings(batch_timeout=TEST_LIMITS.timeout, tick_every=0.1))
    await collector.start()
    metrics = Metrics()
    http = serve_metrics(metrics, 0)
    service = AlertService(conn, EventLogSettings(), parse_rules(DEFAULT_RULES.read_text()), tmp_path / "state.json",
                           metrics=metrics)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: batch-console\n"
                      f"    static_configs: [{{targets: ['127.0.0.1:{http.server_port}']}}]\n")
    prometheus = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        await wait_until(lambda: service.caught_up, timeout=15, what="the alerts service caught up")
        for batch_id in ("prom-1", "prom-2"):
            batch = AtomicBatch(conn, batch_id=batch_id)
            await batch.add("prom.x", b"1")
            batch.skip_seq()
            with pytest.raises(BatchError):
                await batch.commit("prom.x", b"3")
        promql = 'sum(batch_console_lost_batches_total{stream="PROM",reason="incomplete"})'
        result = await eventually(lambda: asyncio.to_thread(query, port, promql),
                                  lambda r: bool(r) and r[0]["value"][1] == "2", timeout=60,
                                  what=f"Prometheus to count 2 ({(tmp_path / 'prometheus.log').read_text()[-500:]})")
        assert result[0]["value"][1] == "2"
    finally:
        prometheus.terminate()
        prometheus.wait(30)
        stop.set()
        await task
        http.shutdown()
        await collector.stop()
        await conn.close()
