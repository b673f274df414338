"""The console's components for Jupyter, on one connection per notebook:

    import panel as pn
    pn.extension("tabulator", inline=True)        # nothing fetched from a CDN
    from console.widgets import NotebookConsole
    console = await NotebookConsole.connect("nats://127.0.0.1:4222", data_dir="data")
    console.live()                                # the Live page, following the event log
    await console.streams()                       # stream batch settings and the editor
    await console.incident("batch-id")            # one lost batch, its timeline and report
    await console.replay("ORDERS")                # fetch/next, peeks, replay a batch
    console.history()                             # what the analytics job wrote to SQLite
    delta_frame("data", "abandonment_hourly")     # the same history from the Delta tables
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import pandas as pd

from console.broker.admin import StreamAdmin
from console.broker.connection import connect
from console.broker.eventlog import EventLogSettings
from console.broker.live_state import LiveState
from console.config import ConnectionSettings, event_key
from console.domain.incident import Incident
from console.domain.live_model import LostBatch
from console.investigate import find_incident
from console.storage import delta
from console.storage.sqlite import open_db_for_reading
from console.ui.history import HistoryPage
from console.ui.incident import IncidentPage
from console.ui.live import LivePage
from console.ui.replay import ReplayPage
from console.ui.streams import StreamsPage

__all__ = ["NotebookConsole", "delta_frame"]


class NotebookConsole:
    def __init__(self, live: LiveState, admin: StreamAdmin, data_dir: Path):
        self.live_state, self.admin, self.data_dir = live, admin, data_dir
        self.engine, self.history_problem = open_db_for_reading(data_dir / "console.db")

    @classmethod
    async def connect(cls, server: str | ConnectionSettings, *, data_dir: str | Path = "data",
                      read_only: bool = False, event_key_file: str | None = None) -> NotebookConsole:
        """event_key_file: the key the collector signs with (default: $BATCH_CONSOLE_EVENT_KEY, else
        DATA_DIR/event.key); events it does not verify are dropped and counted."""
        settings = server if isinstance(server, ConnectionSettings) else ConnectionSettings(servers=(server,))
        nc = await connect(settings)
        live = LiveState(nc, EventLogSettings(key=event_key(event_key_file, data_dir)))
        live.start()
        return cls(live, StreamAdmin(nc, read_only=read_only), Path(data_dir))

    async def caught_up(self, timeout: float = 30.0) -> int:
        """Waits until the live state has applied every event logged so far; returns how many it applied."""
        target = await self.live_state.log.last_seq()
        deadline = asyncio.get_running_loop().time() + timeout
        while self.live_state.last_seq < target:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"live state at event {self.live_state.last_seq} of {target}")
            await asyncio.sleep(0.05)
        return self.live_state.model.events_applied

    @property
    def skipped(self) -> dict[str, int]:
        """Event-log records dropped by reason: malformed, or not signed with the console's key."""
        return dict(self.live_state.log.skipped)

    def lost_batches(self, limit: int = 100) -> list[LostBatch]:
        return self.live_state.model.newest_first(limit)

    def live(self, refresh_ms: int = 500) -> LivePage:
        return LivePage.following(self.live_state, refresh_ms=refresh_ms)

    async def streams(self) -> StreamsPage:
        page = StreamsPage(admin=self.admin)
        await page.reload()
        return page

    async def find_incident(self, batch_id: str) -> Incident | None:
        return await find_incident(self.live_state.log, batch_id, model=self.live_state.model, engine=self.engine)

    async def incident(self, batch_id: str) -> IncidentPage:
        page = IncidentPage(find=self.find_incident, batch_id=batch_id)
        await page.load()
        return page

    async def replay(self, stream: str = "", start_time: datetime | None = None) -> ReplayPage:
        page = ReplayPage(admin=self.admin, stream=stream, start_time=start_time.isoformat() if start_time else "")
        await page.reload()
        return page

    def history(self) -> HistoryPage:
        page = HistoryPage(engine=self.engine, problem=self.history_problem)
        page.reload()
        return page

    async def close(self) -> None:
        await self.live_state.stop()
        await self.admin.nc.close()


def delta_frame(data_dir: str | Path, name: str) -> pd.DataFrame:
    """One of the analytics job's Delta tables (abandonment_hourly, gap_hourly, fast_batch_summary,
    abandoned_batches, stream_abandonment_stats) as pandas, read with deltalake."""
    found = delta.table(Path(data_dir) / "delta" / name)
    if found is None:
        raise FileNotFoundError(f"no Delta table {name} under {data_dir}: run `batch-console analytics --once` first")
    return found.to_pandas()
