"""A real Prometheus (Debian's package) scrapes a real `batch-console alerts --metrics-port` process:
a PromQL query counts real abandonments (timeouts) one by one, the health check on them is scraped as
a warning, every panel of the shipped Grafana dashboard is a query Prometheus answers, and
Prometheus's own graph draws the first one (the README's picture)."""

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from console.alerting.rules_file import DEFAULT_RULES
from tests.processes import CLI, free_port, probe
from tests.waits import poll_until

DASHBOARD = Path(__file__).resolve().parents[2] / "assets" / "grafana-dashboard.json"
pytestmark = pytest.mark.skipif(not shutil.which("prometheus"), reason="scripts/test.sh installs prometheus")


def query(port: int, promql: str) -> dict:
    """Prometheus's answer to an instant query (its status, and the result or the error)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as e:  # a query it refuses: 400 with the reason; starting: 503 in plain text
        body = e.read()
        try:
            return json.loads(body)
        except ValueError:
            return {"status": "down", "error": f"{e.code}: {body[:200]!r}"}
    except OSError as e:  # not up yet
        return {"status": "down", "error": str(e)}


def scrape(port: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def panel_queries() -> list[tuple[str, str]]:
    """(title, PromQL) of every panel, with the dashboard's stream variable at "every stream"."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"].replace("$stream", ".*"))
            for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_prometheus_counts_real_abandonments_answers_every_dashboard_panel_and_draws_them(
        console, data_dir, page, screenshots, tmp_path):
    nats_url, _ = console
    alerts_log = tmp_path / "alerts.log"
    alerts = subprocess.Popen(
        [CLI, "alerts", "--server", nats_url, "--data-dir", str(tmp_path), "--rules", str(DEFAULT_RULES),
         "--event-key-file", str(Path(data_dir) / "event.key"), "--metrics-port", "0", "--check-every", "1"],
        stdout=open(alerts_log, "w"), stderr=subprocess.STDOUT)
    prometheus = None
    try:
        def following():
            assert alerts.poll() is None, alerts_log.read_text()
            return "following the event log live" in alerts_log.read_text()
        poll_until(following, 60, "the alerts process did not start")
        metrics_port = re.search(r"metrics on http://127.0.0.1:(\d+)/metrics", alerts_log.read_text())[1]
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: batch-console\n"
                          f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "prometheus.log", "w"))

        poll_until(lambda: query(port, "up").get("data", {}).get("result"), 60, "Prometheus never scraped")
        promql = 'sum(batch_console_lost_batches_total{stream="PROM",reason="timeout"})'
        for n in (1, 2, 3):  # one at a time, each seen by Prometheus before the next: the graph shows steps
            report = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "PROM",
                           "--subject", "prom.x")  # its one batch is left open: the server abandons it

            def counted():
                result = query(port, promql).get("data", {}).get("result")
                return result and result[0]["value"][1] == str(n)
            poll_until(counted, 60, lambda: f"Prometheus did not count {n} ({report['abandoned_batch']}); it has "
                                           f"{query(port, promql)}, the metrics say:\n{scrape(metrics_port)}")

        # The health checks, evaluated by the same process, scraped by the same Prometheus: the three
        # abandonments are a warning (2) of the abandonment-rate check on PROM
        finding = 'batch_console_check_status{code="BATCH_009",stream="PROM"}'
        poll_until(lambda: (r := query(port, finding).get("data", {}).get("result")) and r[0]["value"][1] == "2",
                   30, lambda: f"Prometheus has {query(port, finding)}; the metrics say:\n{scrape(metrics_port)}")

        for title, expr in panel_queries():
            answer = query(port, expr)
            assert answer["status"] == "success", f"panel {title!r}: {answer.get('error')}"
        variable = json.loads(DASHBOARD.read_text())["templating"]["list"][1]["query"]  # label_values(metric, stream)
        metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable).groups()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/label/{label}/values?"
                                    + urllib.parse.urlencode({"match[]": metric}), timeout=5) as reply:
            assert "PROM" in json.load(reply)["data"]  # the dashboard's stream picker offers it
        lost = poll_until(lambda: query(port, panel_queries()[0][1])["data"]["result"], 30,
                          "the first panel has no series")
        assert {series["metric"]["reason"] for series in lost} == {"timeout"}

        title, expr = panel_queries()[0]
        page.goto(f"http://127.0.0.1:{port}/graph?" + urllib.parse.urlencode(
            {"g0.expr": expr, "g0.tab": "0", "g0.range_input": "1m"}))
        expect(page.get_by_text("Total time series: 1")).to_be_visible(timeout=30_000)
        expect(page.locator(".rickshaw_legend").get_by_text('{reason="timeout"}')).to_be_visible()
        page.screenshot(path=screenshots / "prometheus.png", full_page=True)
    finally:
        for proc in (prometheus, alerts):
            if proc is not None:
                proc.terminate()
                proc.wait(30)
