#!/usr/bin/env bash
# Regenerates the README's screenshots in assets/ on purpose: the browser tests that take them,
# told to save there (a plain test run saves them in a temp folder). Review and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH_CONSOLE_SCREENSHOTS=assets exec .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/ui/test_live_page.py tests/ui/test_streams_page.py tests/ui/test_replay_page.py \
  tests/ui/test_history_incident_probe.py tests/ui/test_alerts_page.py tests/ui/test_prometheus_graph.py "$@"
