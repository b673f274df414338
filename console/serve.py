"""`batch-console serve`: the Panel app. Routes over one runtime per process (one NATS connection,
one live state), shared by every browser session; per-session timers push at a bounded rate."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets

import panel as pn

from tornado.ioloop import IOLoop

from console import pages
from console.config import Settings, host_in_url
from console.errors import ConfigError
from console.login import GuardedBasicAuth
from console.runtime import Runtime



def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def check_exposure(address: str, basic_auth: str | None, insecure: bool) -> None:
    """Anywhere but loopback wants authentication, unless the operator says --insecure."""
    if not is_loopback(address) and not basic_auth and not insecure:
        raise ConfigError(f"refusing to serve on {address} without --basic-auth (or --insecure to accept the risk)")


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
    """The web app: routes over the process's runtime (one connection, one live state, the SQLite
    history), shared by every browser session."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.read_only = runtime.read_only

    def routes(self) -> dict:
        made = {"/": self.live_page, "/streams": self.streams_page, "/replay": self.replay_page,
                "/history": self.history_page, "/incident": self.incident_page, "/alerts": self.alerts_page,
                "/probe": self.probe_page}
        return {path: made[path] for path in self._paths()}

    def _paths(self) -> list[str]:
        return [p for p in pages.PAGES if not (self.read_only and p in pages.CHANGES_THE_SERVER)]

    def live_page(self):
        page = pages.live(self.runtime)
        pn.state.on_session_destroyed(lambda _: page.timer.stop())
        return self._frame(page)

    def streams_page(self):
        page = pages.streams(self.runtime)
        pn.state.onload(page.reload)
        return self._frame(page)

    def replay_page(self):
        page = pages.replay(self.runtime, stream=_arg("stream"), start_time=_arg("start_time"))
        pn.state.onload(page.reload)
        pn.state.on_session_destroyed(lambda _: asyncio.ensure_future(page.close()))
        return self._frame(page)

    def history_page(self):
        page = pages.history(self.runtime)
        pn.state.onload(page.reload)
        return self._frame(page)

    def incident_page(self):
        page = pages.incident(self.runtime, batch_id=_arg("batch"))
        pn.state.onload(page.load)
        return self._frame(page)

    def alerts_page(self):
        page = pages.alerts(self.runtime)
        pn.state.onload(page.reload)
        timer = pn.state.add_periodic_callback(page.reload, period=2000)
        pn.state.on_session_destroyed(lambda _: timer.stop())
        return self._frame(page)

    def probe_page(self):
        return self._frame(pages.probe(self.runtime))

    def _frame(self, page):
        # No template: the stock ones fetch fonts from a CDN, and a console must work offline.
        links = [f"[{pages.PAGES[p]}]({p})" for p in self._paths()]
        nav = pn.pane.Markdown("# JetStream Batch Console\n" + " · ".join(links))
        return pn.Column(nav, page, sizing_mode="stretch_width")


def _arg(name: str) -> str:
    values = pn.state.session_args.get(name) or [b""]
    return values[0].decode(errors="replace")


def serve(settings: Settings) -> None:
    web = settings.web
    check_exposure(web.address, web.basic_auth, web.insecure)
    pn.extension("tabulator", inline=True, notifications=False)
    loop = IOLoop.current()

    async def open_runtime() -> Runtime:
        runtime = await Runtime.open(settings)  # under `up`, a failed start is retried
        runtime.live  # following the event log before the first session arrives
        return runtime

    app = App(loop.run_sync(open_runtime))
    server = pn.io.server.get_server(
        # No URL-location sync: the pages read their query arguments, and Panel's Location cannot
        # parse an IPv6 Host header ("[::1]:8050").
        app.routes(), address=web.address, port=web.port, loop=loop, show=False, start=False, location=False,
        websocket_origin=websocket_origins(web.address, web.port),
        **({"auth_provider": GuardedBasicAuth(web.basic_auth), "cookie_secret": secrets.token_hex(32)}
           if web.basic_auth else {}),
        title="JetStream Batch Console",
    )
    allow_ipv6_origin(server, web.address)
    print(f"serving on http://{host_in_url(web.address)}:{server.port}/", flush=True)
    server.start()
    loop.start()
