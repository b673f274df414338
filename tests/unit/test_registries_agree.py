"""A kind named in one registry is offered the same by every face: History's tables by the page's
download, the API, its export and MCP's tool and by the SQLite reader; export formats by the writers and
the API; the API's reads by MCP's tools (made from its document); the pages of the table by the web,
its navigation and the notebook; the commands by the roles, the README and the API's writes."""

import inspect
from pathlib import Path

import pytest
from typing import get_args

from console.api import changes, reads
from console.api.mcp_tools import READS, WRITES, operations
from console.api.models import ExportFormatName
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


def test_mcps_tools_take_what_the_api_takes(document):
    """A tool's parameter is its operation's: History's tables and the export formats by name, the same."""
    ops = {op.tool: op for op in operations(document, READS + WRITES)[0]}
    [history_table] = [p.annotation for p in ops["history"].params if p.name == "table"]
    assert get_args(history_table) == HISTORY_TABLES
    export = document["paths"]["/api/v1/exports/history/{table}"]["get"]["parameters"]
    assert next(p for p in export if p["name"] == "table")["schema"]["enum"] == list(HISTORY_TABLES)
    formats = next(p for p in export if p["name"] == "format")["schema"]
    assert set(formats.get("enum") or formats["anyOf"][0]["enum"]) == set(FORMATS)


def test_every_page_of_the_table_is_served_navigated_and_made_by_a_notebook():
    from console import pages, widgets
    from console.serve import App

    from dataclasses import replace

    settings = load(environ={})
    assert set(App(Fleet(settings)).routes()) == set(pages.BY_PATH) == {page.path for page in pages.TABLE}
    assert list(pages.PAGES) == [page.path for page in pages.TABLE if page.title]
    read_only = Fleet(replace(settings, web=replace(settings.web, read_only=True)))
    assert set(App(read_only).routes()) == {page.path for page in pages.TABLE if not page.changes_the_server}
    assert "pages.BY_PATH[path].make" in inspect.getsource(widgets.NotebookConsole.page)


def test_every_command_is_a_role_action_named_in_the_readme_and_each_api_write_runs_one(document):
    from console import commands
    from console.api import changes
    from console.domain.roles import built_in_roles

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Actions and the audit trail", 1)[1].split("\n## ", 1)[0]
    roles = built_in_roles(commands.LEAST_ROLE)
    for name, command in commands.COMMANDS.items():
        assert f"`{name}`" in section, f"{name}: not in the README's list of actions"
        assert name in roles["admin"].actions and name in roles[command.role].actions, name
    from console import maintain
    from console.api import maintenance

    source = inspect.getsource(changes) + inspect.getsource(maintenance)
    ran = {n for module in (changes, maintenance) for n in dir(module) if isinstance(getattr(module, n), type)
           and issubclass(getattr(module, n), commands.Command)}
    assert ran and all((getattr(changes, n, None) or getattr(maintenance, n)).__dict__.get("name") in commands.COMMANDS
                       for n in ran), ran
    runners = [n for n in dir(maintain) if callable(getattr(maintain, n)) and getattr(getattr(maintain, n), "__module__",
               "") == maintain.__name__ and "actions.run(" in inspect.getsource(getattr(maintain, n))]  # run a command
    assert {"drain_node", "restart_node"} <= set(runners), runners
    operation_ids = {op["operationId"] for path in document["paths"].values() for op in path.values()}
    for tool in WRITES:  # MCP's writes: the API's operations, each running a command of the registry
        assert tool in operation_ids, tool
        body = source.split(f"async def {tool}(", 1)[1].split("\n    async def ", 1)[0]
        assert (".run(" in body or any(f"{r}(" in body for r in runners)) and any(n in body for n in ran), tool


def test_every_subcommand_is_one_class_offered_by_the_parser_and_the_readme():
    from console.cli import build_parser
    from console.cli.base import SUBCOMMANDS

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    [choices] = [a.choices for a in build_parser()._subparsers._group_actions]  # type: ignore[union-attr]
    assert list(choices) == list(SUBCOMMANDS) and len(SUBCOMMANDS) >= 17
    for name, subcommand in SUBCOMMANDS.items():
        assert f"batch-console {name}" in readme, name
        assert subcommand.run.__func__ is not SUBCOMMANDS["server"].__mro__[1].run.__func__, f"{name} has no run"
