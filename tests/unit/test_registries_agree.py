"""A kind named in one registry is offered the same by every face: History's tables by the page's
download, the API, its export and MCP's tool and by the SQLite reader; export formats by the writers and
the API; the API's reads by MCP's tools (made from its document)."""

import inspect
from pathlib import Path
from typing import get_args

from console.api import changes, reads
from console.api.app import make_api
from console.api.mcp_tools import READS, WRITES, operations
from console.api.models import ExportFormatName
from console.api.tokens import TokenStore
from console.config import load
from console.fleet import Fleet
from console.export import FORMATS
from console.queries.history import HISTORY_TABLES, HistoryTable
from console.storage.history import Reader
from console.ui.history import CSV_TABLES


def test_historys_tables_are_one_list_on_every_face():
    assert CSV_TABLES == HISTORY_TABLES and len(set(HISTORY_TABLES)) == len(HISTORY_TABLES)
    assert all(callable(getattr(Reader(None), table, None)) for table in HISTORY_TABLES)
    for module in (reads, changes):  # each route that takes a table takes these names
        assert "HistoryTable" in inspect.getsource(module), module.__name__
        assert '"abandoned_batches", "abandonments_by_hour"' not in inspect.getsource(module), module.__name__
    assert get_args(HistoryTable) == HISTORY_TABLES


def test_the_export_formats_the_api_takes_are_the_writers():
    assert set(get_args(ExportFormatName)) == set(FORMATS)


def _document() -> dict:
    return make_api(Fleet(load(environ={})), TokenStore(Path("/nonexistent"))).openapi()


def test_mcps_tools_take_what_the_api_takes():
    """A tool's parameter is its operation's: History's tables and the export formats by name, the same."""
    document = _document()
    ops = {op.tool: op for op in operations(document, READS + WRITES)[0]}
    [history_table] = [p.annotation for p in ops["history"].params if p.name == "table"]
    assert get_args(history_table) == HISTORY_TABLES
    export = document["paths"]["/api/v1/exports/history/{table}"]["get"]["parameters"]
    assert next(p for p in export if p["name"] == "table")["schema"]["enum"] == list(HISTORY_TABLES)
    formats = next(p for p in export if p["name"] == "format")["schema"]
    assert set(formats.get("enum") or formats["anyOf"][0]["enum"]) == set(FORMATS)
