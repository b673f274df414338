"""promtool (Debian's prometheus package) checks the shipped alerting rules, which follow the console's
own rule set. A real Prometheus scraping a real alerts process: tests/ui/test_prometheus_graph.py."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from console.alerting.rules_file import DEFAULT_RULES
from console.domain.alert_rules import parse_rules

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
    from console.domain.reasons import REASONS  # the catch-all excludes exactly the reasons the console knows

    [known] = re.findall(r'reason!~"([^"]+)"', (ASSETS / "prometheus-rules.yml").read_text())
    assert known.split("|") == list(REASONS)
    json.loads((ASSETS / "grafana-dashboard.json").read_text())  # the dashboard is valid JSON
