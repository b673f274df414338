"""The Checks page against a real alerts process evaluating the checks on its timer: a lost batch
on a stream is a finding with its evidence, its remedy and a link to the stream's page; the
deployment's own findings (no system account here) are there without a stream; the URL filters."""

import subprocess
from pathlib import Path

from playwright.sync_api import expect

from tests.processes import CLI, probe


def test_findings_by_severity_with_evidence_remedy_and_a_link_to_the_stream(console, data_dir, page, screenshots):
    nats_url, web_url = console
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_CHECKS",
          "--subject", "ui.checks")
    log = Path(data_dir) / "alerts-checks.log"
    alerts = subprocess.Popen([CLI, "alerts", "--server", nats_url, "--data-dir", data_dir, "--check-every", "1",
                               "--webhook-hosts", "127.0.0.1"], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        page.goto(web_url + "checks?stream=UI_CHECKS")
        row = page.get_by_role("row").filter(has_text="BATCH_009")
        expect(row).to_contain_text("atomic batches abandoned in 60 min", timeout=30_000)
        expect(row).to_contain_text("Open the stream's Incident view")  # the remedy
        expect(row.get_by_role("link", name="UI_CHECKS")).to_have_attribute("href", "/stream?name=UI_CHECKS")
        expect(page.get_by_text("evaluated")).to_be_visible()
        page.screenshot(path=screenshots / "checks.png", full_page=True)

        page.goto(web_url + "checks?severity=warning")
        expect(page.get_by_role("row").filter(has_text="no system-account access")).to_be_visible(timeout=30_000)
        expect(page.get_by_role("row").filter(has_text="critical")).to_have_count(0)
        assert page.goto(web_url + "checks?severity=%3Cscript%3E").status == 200  # not a severity: left out
        expect(page.get_by_label("severity")).to_have_value("(any)")
    finally:
        alerts.terminate()
        alerts.wait(timeout=20)
