"""The types, enforced: mypy --strict over the domain (every parser of wire input) and the settings
tree, as pyproject.toml's [tool.mypy] names them."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_domain_and_the_settings_type_check_strictly():
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-1000:]
    assert "Success: no issues found" in done.stdout
