"""A kind named in one registry is offered the same by every face: History's tables by the page's
download, the API, its export and MCP's tool and by the SQLite reader; export formats by the writers and
the API."""

import inspect
from typing import get_args

from console.api import changes, mcp_server, reads
from console.api.models import ExportFormatName
from console.export import FORMATS
from console.queries.history import HISTORY_TABLES, HistoryTable
from console.storage.history import Reader
from console.ui.history import CSV_TABLES


def test_historys_tables_are_one_list_on_every_face():
    assert CSV_TABLES == HISTORY_TABLES and len(set(HISTORY_TABLES)) == len(HISTORY_TABLES)
    assert all(callable(getattr(Reader(None), table, None)) for table in HISTORY_TABLES)
    for module in (reads, changes, mcp_server):  # each route or tool that takes a table takes these names
        assert "HistoryTable" in inspect.getsource(module), module.__name__
        assert '"abandoned_batches", "abandonments_by_hour"' not in inspect.getsource(module), module.__name__
    assert get_args(HistoryTable) == HISTORY_TABLES


def test_the_export_formats_the_api_takes_are_the_writers():
    assert set(get_args(ExportFormatName)) == set(FORMATS)
