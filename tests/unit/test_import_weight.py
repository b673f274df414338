"""What a command's process loads before it does anything: the CLI and the stdio MCP server start without
the web's libraries (panel and bokeh), Spark, pandas or SQL, which cost seconds of CPU in every process that
imports them (an MCP client waits for `batch-console mcp`; the tests and `up` start hundreds of commands)."""

import subprocess
import sys

HEAVY = ("panel", "bokeh", "pyspark", "pandas", "sqlalchemy", "sqlmodel", "cel")


def loaded(*modules: str) -> list[str]:
    code = f"import sys, {', '.join(modules)}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_cli_and_the_stdio_mcp_server_load_none_of_the_heavy_libraries():
    assert loaded("console.cli", "console.api.mcp_server") == []


def test_the_check_sees_a_heavy_import():  # the check itself can fail
    assert loaded("console.storage.history") != []
