"""`batch-console serve`: the Panel app's composition root. One NATS connection and one LiveState
per process, shared by every browser session; per-session timers push at a bounded rate."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
from pathlib import Path

import panel as pn

from console.broker.admin import StreamAdmin
from console.broker.connection import connect
from console.broker.eventlog import EventLogSettings
from console.broker.live_state import LiveState
from console.config import ConnectionSettings
from console.errors import ConfigError, ReadOnlyError
from console.investigate import find_incident, replay_link
from console.login import GuardedBasicAuth
from console.probe import ProbeOptions, ProbeReport, run_probe
from console.storage.sqlite import open_db_for_reading
from console.ui.history import HistoryPage
from console.ui.incident import IncidentPage
from console.ui.live import LivePage
from console.ui.probe import ProbePage
from console.ui.replay import ReplayPage
from console.ui.streams import StreamsPage

log = logging.getLogger(__name__)


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def check_exposure(address: str, basic_auth: str | None, insecure: bool) -> None:
    """Anywhere but loopback wants authentication, unless the operator says --insecure."""
    if not is_loopback(address) and not basic_auth and not insecure:
        raise ConfigError(f"refusing to serve on {address} without --basic-auth (or --insecure to accept the risk)")


def host_in_url(address: str) -> str:
    """An IPv6 address goes in brackets in a URL and a Host header."""
    return f"[{address}]" if ":" in address else address


def websocket_origins(address: str, port: int) -> list[str]:
    """Bokeh's allowlist builder cannot parse an IPv6 host; allow_ipv6_origin adds that one later."""
    names = ["localhost", "127.0.0.1"] + ([] if ":" in address or address in ("localhost", "127.0.0.1") else [address])
    return [f"{name}:{port}" for name in names]


def allow_ipv6_origin(server, address: str) -> None:
    """A page on http://[::1]:PORT/ sends Origin [::1]:PORT; Bokeh's check matches that string exactly
    against the server's origin set, which only its builder refuses to hold."""
    if ":" in address:
        server._tornado.websocket_origins.add(f"[{address}]:{server.port}")


class App:
    """The process's shared pieces (one connection, one live state, the SQLite tables) and its pages."""

    def __init__(self, settings: ConnectionSettings, read_only: bool = False, data_dir: Path = Path("data"),
                 event_log: EventLogSettings = EventLogSettings()):
        self.settings = settings
        self.event_log = event_log
        self.read_only = read_only
        self.engine, self.history_problem = open_db_for_reading(data_dir / "console.db")
        if self.history_problem:
            log.warning("%s; Live, Streams and Replay go on", self.history_problem)
        self.live: LiveState | None = None
        self.admin: StreamAdmin | None = None

    async def start(self) -> None:
        nc = await connect(self.settings, give_up_after=30)  # under `up`, a failed start is retried
        self.live = LiveState(nc, self.event_log)
        self.live.start()
        self.admin = StreamAdmin(nc, read_only=self.read_only)

    def routes(self) -> dict:
        pages = {"/": self.live_page, "/streams": self.streams_page, "/replay": self.replay_page,
                 "/history": self.history_page, "/incident": self.incident_page}
        if not self.read_only:
            pages["/probe"] = self.probe_page
        return pages

    def live_page(self):
        page = LivePage.following(self.live)
        pn.state.on_session_destroyed(lambda _: page.timer.stop())
        return self._frame(page)

    def streams_page(self):
        page = StreamsPage(admin=self.admin)
        pn.state.onload(page.reload)
        return self._frame(page)

    def replay_page(self):
        page = ReplayPage(admin=self.admin, stream=_arg("stream"), start_time=_arg("start_time"))
        pn.state.onload(page.reload)
        pn.state.on_session_destroyed(lambda _: asyncio.ensure_future(page.close()))
        return self._frame(page)

    def history_page(self):
        page = HistoryPage(engine=self.engine, problem=self.history_problem)
        pn.state.onload(page.reload)
        return self._frame(page)

    def incident_page(self):
        page = IncidentPage(find=self.find_incident, replay_link=replay_link, batch_id=_arg("batch"))
        pn.state.onload(page.load)
        return self._frame(page)

    def probe_page(self):
        return self._frame(ProbePage(run=self.run_probe))

    async def find_incident(self, batch_id: str):
        return await find_incident(self.live.log, batch_id, model=self.live.model, engine=self.engine)

    async def run_probe(self, options: ProbeOptions, progress) -> ProbeReport:
        if self.read_only:
            raise ReadOnlyError("read-only mode: probes publish to the server and are refused")
        return await run_probe(self.admin.nc, options, progress)

    def _frame(self, page):
        # No template: the stock ones fetch fonts from a CDN, and a console must work offline.
        links = ["[Live](/)", "[Streams](/streams)", "[Replay](/replay)", "[History](/history)",
                 "[Incident](/incident)"] + ([] if self.read_only else ["[Probe](/probe)"])
        nav = pn.pane.Markdown("# JetStream Batch Console\n" + " · ".join(links))
        return pn.Column(nav, page, sizing_mode="stretch_width")


def _arg(name: str) -> str:
    values = pn.state.session_args.get(name) or [b""]
    return values[0].decode(errors="replace")


def serve(settings: ConnectionSettings, *, address: str = "127.0.0.1", port: int = 8050, data_dir: Path = Path("data"),
          basic_auth: str | None = None, insecure: bool = False, read_only: bool = False,
          event_log: EventLogSettings = EventLogSettings()) -> None:
    check_exposure(address, basic_auth, insecure)
    pn.extension("tabulator", inline=True, notifications=False)
    app = App(settings, read_only=read_only, data_dir=data_dir, event_log=event_log)
    server = pn.io.server.get_server(
        # No URL-location sync: the pages read their query arguments, and Panel's Location cannot
        # parse an IPv6 Host header ("[::1]:8050").
        app.routes(), address=address, port=port, show=False, start=False, location=False,
        websocket_origin=websocket_origins(address, port),
        **({"auth_provider": GuardedBasicAuth(basic_auth), "cookie_secret": secrets.token_hex(32)} if basic_auth else {}),
        title="JetStream Batch Console",
    )
    allow_ipv6_origin(server, address)
    server.io_loop.run_sync(app.start)  # connected before the first session can arrive
    print(f"serving on http://{host_in_url(address)}:{server.port}/", flush=True)
    server.start()
    server.io_loop.start()
