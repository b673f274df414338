"""`batch-console report --month 2026-11`: a month's losses for the streams' owners, in Markdown or in one
HTML file with its plots inline, from the SQLite tables the analytics job keeps (History's numbers)."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

from console.config import Settings
from console.errors import ConfigError


def run_report(settings: Settings, month: str | None, fmt: str, output: str | None) -> int:
    from console.domain.monthly_report import as_html, markdown
    from console.runtime import objectives_of
    from console.services.budgets import month_report
    from console.storage.sqlite import open_db_for_reading

    month = month or datetime.now(timezone.utc).strftime("%Y-%m")
    engine, problem = open_db_for_reading(settings.data.db_path)
    if engine is None:
        raise ConfigError(problem or f"no analytics tables at {settings.data.db_path}")
    try:
        report = month_report(objectives_of(settings), engine, month)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    finally:
        engine.dispose()
    text = markdown(report) if fmt == "markdown" else as_html(report)
    if output:
        Path(output).write_text(text)
        print(f"report of {month}: {report.lost_batches:,} batches and {report.lost_messages:,} messages lost, "
              f"written to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
