"""Each reproduction under scripts/repro/ still reproduces on the releases its divergence names, and
shows ADR-50's behaviour on the others (or says it cannot run there): the README's list stays true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console.domain.server_versions import DIVERGENCES, FEATURES, release
from tests.server_versions import VERSIONS

REPRO = Path(__file__).resolve().parents[2] / "scripts" / "repro"
REPRODUCED, AS_THE_ADR_SAYS, NOT_APPLICABLE = 0, 1, 2
# Checked and found to be what ADR-50 says on every release that can run it: kept as the evidence
CHECKED = {"fast_fail_mode_across_leader_change.py": "fast_ingest"}


def run(script: str, version: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPRO / script), version], capture_output=True, text=True,
                          timeout=240, cwd=REPRO)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("divergence", DIVERGENCES, ids=lambda d: d.id)
def test_a_divergence_reproduces_exactly_on_the_releases_it_names(divergence, version):
    done = run(divergence.repro, version)
    expected = REPRODUCED if divergence.affects(release(version)) else AS_THE_ADR_SAYS
    assert done.returncode == expected, done.stdout + done.stderr[-2000:]
    assert f"nats-server {version}:" in done.stdout


@pytest.mark.cluster
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("script", CHECKED)
def test_a_case_checked_and_found_as_the_adr_says_stays_so(script, version):
    done = run(script, version)
    runs = release(version) >= FEATURES[CHECKED[script]].since
    assert done.returncode == (AS_THE_ADR_SAYS if runs else NOT_APPLICABLE), done.stdout + done.stderr[-2000:]


def test_every_script_here_is_a_divergence_or_a_case_checked():
    scripts = {p.name for p in REPRO.glob("*.py")} - {"common.py"}
    assert scripts == {d.repro for d in DIVERGENCES} | set(CHECKED)
