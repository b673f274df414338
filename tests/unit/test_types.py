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


DEBT = Path(__file__).with_name("mypy_debt.txt")


def test_all_of_the_console_type_checks_but_the_modules_listed_as_debt():
    """A plain pass over every module of console/: a new one is covered by default, and a listed one that
    has become clean is taken off the list (the list only shrinks)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "/dev/null", "--python-version", "3.11",
                           "--ignore-missing-imports", "--no-incremental", "console"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    failing = {line.split(":", 1)[0] for line in done.stdout.splitlines() if ": error:" in line}
    debt = {line for line in DEBT.read_text().splitlines() if line and not line.startswith("#")}
    assert failing - debt == set(), "\n".join(e for e in done.stdout.splitlines() if e.split(":", 1)[0] in failing - debt)
    assert debt - failing == set(), f"type-clean now: take these off {DEBT.name}"
