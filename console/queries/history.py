"""History's tables as every face names them: the page's download, the API's /history/{table} and its
export, and MCP's history tool take these names, from here."""

from __future__ import annotations

from typing import Literal, get_args

HistoryTable = Literal["abandoned_batches", "abandonments_by_hour", "abandonments_by_stream", "gaps_by_hour",
                       "fast_outcomes", "capture_interruptions", "maintenances", "consumer_lag_by_hour"]
HISTORY_TABLES: tuple[str, ...] = get_args(HistoryTable)
