#!/usr/bin/env bash
# Regenerates the README's screenshots on purpose, in light (assets/) and dark (assets/dark/): the
# browser tests that take them, told to save there (a plain test run saves them in a temp folder).
# Review and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=(tests/ui/test_live_page.py tests/ui/test_streams_page.py tests/ui/test_replay_page.py
       tests/ui/test_history_incident_probe.py tests/ui/test_alerts_page.py tests/ui/test_stream_page.py
       tests/ui/test_prometheus_graph.py)
BATCH_CONSOLE_SCREENSHOTS=assets .venv/bin/python -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
mkdir -p assets/dark
BATCH_CONSOLE_SCREENSHOTS=assets/dark BATCH_CONSOLE_SCREENSHOT_THEME=dark \
  .venv/bin/python -m pytest -q -p no:cacheprovider "${tests[@]:0:6}" "$@"
