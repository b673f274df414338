"""The console's pages in Jupyter: a runtime plus the page factories, on one connection per notebook.

    import panel as pn
    pn.extension("tabulator", inline=True)        # nothing fetched from a CDN
    from console.widgets import NotebookConsole
    console = await NotebookConsole.open()        # settings from BATCH_CONSOLE_* (server, creds, data dir...)
    console.live()                                # the Live page, following the event log
    await console.streams()                       # stream batch settings and the editor
    await console.incident("batch-id")            # one lost batch, its timeline and report
    replay = await console.replay("ORDERS")       # fetch/next, peeks, replay a batch
    await replay.fetch()                          # ... driven by its params: replay.stream = "OTHER"
    console.history()                             # what the analytics job wrote to SQLite (.dates = ...)
    await console.audit()                         # who changed what (every action is audited, notebook's too)
    await console.conformance()                   # which batch publishers follow ADR-50 (.report(): the verdicts)
    await console.search("ORDERS", where='payload.amount > 100')  # matches and how the search ended
    delta_frame("data", "abandonment_hourly")     # the same history from the Delta tables
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from console import pages
from console.config import ConnectionSettings, Settings, beside_up, found_data_dir, load
from console.actions import Actions
from console.domain.audit import NOTEBOOK
from console.errors import ConfigError, KeyMismatchError
from console.domain.budgets import BudgetStatus
from console.domain.canary import CanaryResult
from console.domain.incident import Incident
from console.domain.live_model import LostBatch
from console.runtime import Runtime
from console.storage import delta
from console.ui.alerts import AlertsPage
from console.ui.audit import AuditPage
from console.ui.conformance import ConformancePage
from console.ui.history import HistoryPage
from console.ui.incident import IncidentPage
from console.queries.reads import SystemReads
from console.queries.sight import Sight
from console.queries.streams import StreamReads
from console.ui.live import LivePage, seen
from console.ui.replay import ReplayPage
from console.ui.streams import StreamsPage

__all__ = ["NotebookConsole", "delta_frame"]


def systems(settings: Settings | None = None) -> list[str]:
    """The names of the systems file's systems (none without a file): what NotebookConsole.open(system=...)
    takes."""
    return [s.name for s in (load() if settings is None else settings).systems()]


class NotebookConsole:
    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.data_dir = runtime.settings.data.system_dir  # its console.db and delta/ (of a systems file's system, its own)

    @classmethod
    async def open(cls, settings: Settings | None = None, *, system: str | None = None,
                   **sections: Any) -> NotebookConsole:
        """The settings (default: from the environment, as every command reads them), with any
        section replaced: `open(web=WebSettings(read_only=True))`. With a systems file (`--systems`,
        BATCH_CONSOLE_SYSTEMS), `system` names the one to open (systems() lists them). Events the
        console's key does not verify are dropped and counted (see skipped)."""
        settings = replace(load() if settings is None else settings, **sections)
        specs = {s.name: s for s in settings.systems()}  # the file read and its named files checked once
        if system is not None:
            if system not in specs:
                raise ConfigError(f"no system {system[:64]!r} in the systems file ({', '.join(specs) or 'none'})")
            settings = settings.of_system(specs[system])
        elif specs:
            raise ConfigError(f"several systems: open one of them, open(system=...) ({', '.join(specs)})")
        # the URLs a running `up` on that data directory chose, unless given: a notebook beside `up` needs nothing
        settings = beside_up(found_data_dir(settings))
        print(f"batch console: data directory {settings.data.data_dir.resolve()}")
        runtime = await Runtime.open(settings)
        try:
            runtime.live  # following from now on; a missing event key is said here
        except BaseException:
            await runtime.close()
            raise
        return cls(runtime)

    @classmethod
    async def connect(cls, server: str | ConnectionSettings | None = None, *, data_dir: str | Path | None = None,
                      read_only: bool = False, decoders: str | Path | None = None) -> NotebookConsole:
        """open() with a server URL (or connection settings), a data directory and a decoders file given
        here; the rest (credentials, the event key) from the environment."""
        settings = load()
        if decoders is not None:
            settings = replace(settings, data=replace(settings.data, decoders=Path(decoders)))
        if server is not None:
            connection = server if isinstance(server, ConnectionSettings) else replace(settings.connection,
                                                                                        servers=(server,))
            settings = replace(settings, connection=connection)
        if data_dir is not None:
            settings = replace(settings, data=replace(settings.data, data_dir=Path(data_dir)))
        return await cls.open(settings, web=replace(settings.web, read_only=read_only))

    @property
    def live_state(self) -> Any:
        return self.runtime.live

    @property
    def admin(self) -> StreamReads:
        """The server's streams as the local role sees them, reads only (another team's stream is answered
        as one that does not exist); what changes the server goes through `actions`."""
        return StreamReads(self.runtime.admin, self.sight.sees)

    @property
    def sight(self) -> Sight:
        """What this notebook is shown: the local role's streams (every face's one rule)."""
        return Sight(lambda: self.actions.grants)

    @property
    def reads(self) -> SystemReads:
        """What this notebook reads (console.queries.reads): findings, budgets, the audit trail, verdicts,
        History and incidents of the streams the local role sees."""
        return SystemReads(self.runtime, self.sight)

    @property
    def history_reader(self) -> Any:
        """The SQLite history's queries (`.abandonments_by_stream(start, end)`) of the streams the local role
        sees, or None."""
        return self.reads.history()

    async def caught_up(self, timeout: float = 30.0) -> int:
        """Waits until the live state has applied every event logged so far; returns how many it applied."""
        live = self.runtime.live
        target = await live.log.last_seq()
        deadline = asyncio.get_running_loop().time() + timeout
        while live.last_seq < target:  # a log holding an older key's events may look wrong until the end
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"live state at event {live.last_seq} of {target}")
            await asyncio.sleep(0.05)
        if live.key_problem:  # the collector's events were all dropped as forged
            raise KeyMismatchError(live.key_problem)
        return live.model.events_applied

    @property
    def skipped(self) -> dict[str, int]:
        """Event-log records dropped by reason: malformed, or not signed with the console's key."""
        return dict(self.runtime.live.log.skipped)

    def lost_batches(self, limit: int = 100) -> list[LostBatch]:
        return list(seen(self.runtime.live.model, self.sight.limit).newest_first(limit))

    def live(self, refresh_ms: int = 500) -> LivePage:
        return pages.live(self.runtime, self.actions, refresh_ms=refresh_ms)

    async def streams(self) -> StreamsPage:
        page: StreamsPage = await self.page("/streams")
        return page

    async def find_incident(self, batch_id: str) -> Incident | None:
        return await self.reads.incident(batch_id)

    async def incident(self, batch_id: str) -> IncidentPage:
        page: IncidentPage = await self.page("/incident", batch_id=batch_id, replay_link=lambda incident: None)
        return page

    async def replay(self, stream: str = "", start_time: datetime | None = None) -> ReplayPage:
        page: ReplayPage = await self.page("/replay", stream=stream,
                                           start_time=start_time.isoformat() if start_time else "")
        return page

    def history(self, **params: Any) -> HistoryPage:
        page = pages.history(self.runtime, self.actions, **params)
        page.read()
        return page

    async def alerts(self) -> AlertsPage:
        """The alert rules; mute, unmute and save are actions (audited; refused in read-only mode)."""
        page: AlertsPage = await self.page("/alerts")
        return page

    async def audit(self, **params: Any) -> AuditPage:
        """Who asked the console to change what: the audit trail, its chain checked."""
        page: AuditPage = await self.page("/audit", **params)
        return page

    async def search(self, stream: str, **query: Any) -> Any:
        """A bounded search of a stream (the action search.run, audited): `await console.search("ORDERS",
        where='payload.amount > 100', max_matches=50)` -> (matches, how it ended)."""
        from console.domain.search import SearchQuery

        from console.commands import RunSearch

        return await self.actions.run(RunSearch(SearchQuery(stream, **query)))

    def decoded(self, stream: str, message: Any) -> Any:
        """A message (a search's match, a Replay message) as its stream's decoder reads it: a dict of plain
        values (enums by name, bytes as bytes, int64 exact); DecodeError, with its reason, when it does not
        decode; its bytes where no decoder takes the stream (`--decoders`, BATCH_CONSOLE_DECODERS)."""
        from console.decoders import DecodeError

        data = message.data if hasattr(message, "data") else message.payload
        found = self.runtime.payloads(self.actions.payloads).decoded(stream, message.subject, message.headers, data)
        if found is None:
            return data
        if found.error is not None:
            raise DecodeError(found.error)
        return found.value

    def budgets(self) -> list[BudgetStatus]:
        """Each loss objective's measures now (`--objectives`): `.spent`, `.remaining`, `.burns` (window -> burn
        rate), `.burning` (the workbook pair it burns on, or None); [] without objectives or history. The
        page: `await console.page("/budgets")`."""
        return self.reads.budgets() or []

    async def canaries(self, minutes: float = 60.0) -> list[tuple[datetime, CanaryResult]]:
        """The canary batches of the last `minutes` (`batch-console canary`), oldest first: (when, result)
        with `.node`, `.kind`, `.first_ack_ms`, `.commit_ms`, `.lost`. The page: `await console.page("/canary")`."""
        from console.services.canaries import recent_canaries

        return await recent_canaries(lambda: self.runtime.nc, lambda: self.runtime.event_log, minutes)

    async def conformance(self, **params: Any) -> ConformancePage:
        """The publishers' verdicts against ADR-50, as the collector graded them (`.matrix`, `.failures`)."""
        page: ConformancePage = await self.page("/conformance", **params)
        return page

    async def consumers(self, stream: str | None = None) -> pd.DataFrame:
        """Every consumer the notebook's roles see, one row each: pending, ack_pending, redelivered, waiting,
        lag_seconds (the oldest undelivered message's age), state (stalled, lagging, paused, ok, caught_up),
        trend and catch_up_seconds; each call judges against the calls before (a stall over 30 s of them).
        The page: `await console.page("/consumers")`."""
        from console.queries.consumers import SeenConsumers

        found = await SeenConsumers(self.runtime.consumers, self.sight).read(stream, fresh_within=0)
        return pd.DataFrame([j.as_json() for j in found.judged])

    async def page(self, path: str, **params: Any) -> Any:
        """Any page of the table (console.pages.TABLE) by its path, read once: `await console.page("/streams")`."""
        page = pages.BY_PATH[path].make(self.runtime, self.actions, **params)
        await page.reload()
        return page

    @property
    def actions(self) -> Actions:
        """What this notebook may do: the local role's actions (--local-role, in the roles file), audited
        as the user "notebook"."""
        return self.runtime.actions(NOTEBOOK)

    async def close(self) -> None:
        await self.runtime.close()


def delta_frame(data_dir: str | Path, name: str) -> pd.DataFrame:
    """One of the analytics job's Delta tables (abandonment_hourly, gap_hourly, fast_batch_summary,
    abandoned_batches, stream_abandonment_stats) as pandas, read with deltalake."""
    found = delta.table(Path(data_dir) / "delta" / name)
    if found is None:
        raise FileNotFoundError(f"no Delta table {name} under {data_dir}: run `batch-console analytics --once` first")
    return found.to_pandas()
