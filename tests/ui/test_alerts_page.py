"""The Alerts page against a real alerts process: a rule fires on a real abandonment, its webhook is
down, and the page shows the alert firing and each failed delivery in red; a rule is muted from the
page; read-only mode changes nothing. Live's status bar counts the alerts firing."""

import re
import signal
import subprocess
from pathlib import Path

from playwright.sync_api import expect

from tests.processes import CLI, free_port, probe
from tests.waits import poll_until

RULE = """[[rule]]
name = "ui alerts abandoned"
when = "lost_batches"
streams = ["UI_ALERTS"]
within = "10m"
severity = "critical"
notify = ["webhook:http://127.0.0.1:{port}/hook"]
"""



def rule_row(state: str) -> re.Pattern:
    """The rule's row in the Rules table, in this state (not a row of what was sent)."""
    return re.compile(rf"^ui alerts abandoned {state} .* lost_batches ")  # the state beside the name: in view


def test_a_firing_rule_with_a_receiver_down_shows_its_failed_deliveries_and_is_muted_from_the_page(
        console, data_dir, read_only_url, page, screenshots):
    nats_url, web_url = console
    data = Path(data_dir)
    (data / "alert-rules.toml").write_text(RULE.format(port=free_port()))
    log = data / "alerts.log"
    alerts = subprocess.Popen([CLI, "alerts", "--server", nats_url, "--data-dir", str(data), "--webhook-hosts", "127.0.0.1"],
                              stdout=open(log, "w"),
                              stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: alerts.poll() is None and "following the event log live" in log.read_text(), 60,
                   f"the alerts process did not start:\n{log.read_text()}")
        probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "UI_ALERTS",
              "--subject", "ui_alerts.x")
        page.goto(web_url + "alerts")
        expect(page.get_by_role("row", name=rule_row("FIRING"))).to_be_visible(timeout=30_000)
        expect(page.get_by_role("row").filter(has_text="UI_ALERTS").first).to_be_visible()
        expect(page.get_by_text("failed: ConnectionRefusedError", exact=False).first).to_be_visible(timeout=30_000)
        # red; an auto-retrying check: the table is redrawn every 2 s, and a cell caught mid-redraw has no style
        expect(page.get_by_text("failed: ConnectionRefusedError", exact=False).first).to_have_css("color", "rgb(201, 42, 42)")
        page.screenshot(path=screenshots / "alerts.png", full_page=True)

        page.goto(web_url)
        expect(page.get_by_text("1 alert firing", exact=True)).to_be_visible(timeout=15_000)

        page.goto(read_only_url + "alerts")
        expect(page.get_by_role("row", name=rule_row("FIRING"))).to_be_visible(timeout=30_000)
        expect(page.get_by_role("button", name="Save rule")).to_have_count(0)
        expect(page.get_by_role("button", name="Mute")).to_have_count(0)

        page.goto(web_url + "alerts")
        expect(page.get_by_label("rule", exact=True)).to_contain_text("ui alerts abandoned", timeout=30_000)
        page.get_by_role("button", name="Mute", exact=True).click()
        expect(page.get_by_role("row", name=rule_row("muted"))).to_be_visible(timeout=15_000)
        assert "muted = true" in (data / "alert-rules.toml").read_text()
        poll_until(lambda: "rules reloaded" in log.read_text(), 30, "the alerts process did not reload the rules")
    finally:
        alerts.send_signal(signal.SIGTERM)
        alerts.wait(30)
        (data / "alert-rules.toml").unlink(missing_ok=True)
