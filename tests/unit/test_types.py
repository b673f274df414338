"""The types, enforced: mypy --strict over the whole of console/ in one pass, as pyproject.toml's [tool.mypy]
says (no module left out; the libraries that ship no types are named there, and only calls into them go
unchecked)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_of_the_console_type_checks_strictly():
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-1000:]
    assert "Success: no issues found" in done.stdout


def test_the_strict_pass_covers_every_module_and_ignores_no_errors():
    """No module taken out of the pass, no package whose errors are ignored, strict for all."""
    config = (ROOT / "pyproject.toml").read_text().split("[tool.mypy]", 1)[1].split("\n# ", 1)[0]
    assert 'files = ["console"]' in config and "strict = true" in config
    assert "ignore_errors" not in config and "exclude" not in config.replace("untyped_calls_exclude", "")
