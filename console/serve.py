"""`batch-console serve`: the Panel app. Routes over one runtime per process (one NATS connection,
one live state), shared by every browser session; per-session timers push at a bounded rate."""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import secrets
from datetime import datetime, timezone
from typing import Any

import panel as pn
from tornado.ioloop import IOLoop

from console import pages
from console.config import Settings, host_in_url
from console.actions import Actions
from console.domain.audit import Actor
from console.domain.roles import Grants
from console.errors import ConfigError
from console.login import GuardedBasicAuth
from console.oidc import SESSION_COOKIE, OidcAuth, Provider
from console.runtime import Runtime, check_files
from console.ui.audit import default_since
from console.fleet import Fleet
from console.ui.controls import name_the_system
from console.ui.frame import Frame, Prefs, Systems, Who
from console.ui.preview import attach, static_html

REDRAW_EVERY_MS = 2000  # the header's badges, and the pages that follow a state of their own
TAB_CHECK_MS = 500  # how often a page that holds something on the server looks whether its tab is still there



def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def mcp_patterns(api: Any, settings: Settings, loop: Any) -> list[tuple[Any, ...]]:
    """`--mcp`: MCP's streamable HTTP at /mcp (and its protected-resource metadata), its sessions run for
    as long as the process serves."""
    web = settings.web
    if not web.mcp:
        return []
    from console.api.bridge import AsgiHandler
    from console.api.mcp_server import http_app

    url = settings.alerting.console_url or f"http://{host_in_url(web.address)}:{web.port}"
    app, sessions = http_app(api, api.state.callers, url, web.address, web.mcp_writes)

    async def run_sessions() -> None:
        async with sessions.run():
            await asyncio.Event().wait()

    loop.spawn_callback(run_sessions)
    return [(r"/mcp", AsgiHandler, {"app": app}), (r"/\.well-known/oauth-protected-resource/mcp", AsgiHandler, {"app": app})]


def check_exposure(address: str, basic_auth: str | None, insecure: bool, oidc: bool = False) -> None:
    """Anywhere but loopback wants authentication, unless the operator says --insecure."""
    if not is_loopback(address) and not basic_auth and not oidc and not insecure:
        raise ConfigError(f"refusing to serve on {address} without --basic-auth or --oidc-issuer (or --insecure to "
                          "accept the risk)")


def websocket_origins(address: str, port: int) -> list[str]:
    """Bokeh's allowlist builder cannot parse an IPv6 host; allow_ipv6_origin adds that one later."""
    names = ["localhost", "127.0.0.1"] + ([] if ":" in address or address in ("localhost", "127.0.0.1") else [address])
    return [f"{name}:{port}" for name in names]


def allow_ipv6_origin(server: Any, address: str) -> None:
    """A page on http://[::1]:PORT/ sends Origin [::1]:PORT; Bokeh's check matches that string exactly
    against the server's origin set, which only its builder refuses to hold."""
    if ":" in address:
        server._tornado.websocket_origins.add(f"[{address}]:{server.port}")


class App:
    """The web app: routes over the process's runtime (one connection, one live state, the SQLite
    history), shared by every browser session."""

    def __init__(self, fleet: Fleet, url_state: bool = True, oidc: OidcAuth | None = None):
        self.fleet = fleet
        self.read_only = fleet.read_only
        self.url_state = url_state  # off on an IPv6 address: Panel's Location cannot parse its Host header
        self.oidc = oidc


    def routes(self) -> dict[str, Any]:
        """A route for each page of the table; read-only mode leaves out those that change the server."""
        return {page.path: self._route(page) for page in pages.TABLE if not (self.read_only and page.changes_the_server)}

    def _route(self, spec: pages.Page) -> Any:
        def session() -> Frame:  # Panel serves a function (a partial it would show as an object)
            return self._session(spec)
        return session

    def _session(self, spec: pages.Page) -> Frame:
        """One browser session's page, kept to the page protocol (console.pages)."""
        prefs = _prefs()
        chosen = self.fleet.known(_arg("system"))  # None: all systems, or the first for a page on one
        runtime = self.fleet.runtime(chosen)
        if self.fleet.several and chosen is None and spec.across is not None and runtime is not None:
            shown, actions = None, self._actions(runtime)
            page = spec.across(self.fleet, actions, clock=prefs.clock, **_from_url(spec))
        elif runtime is None:  # named, or the first, and not reached yet: said, and nothing else is waited for
            shown, actions = chosen or self.fleet.names[0], None
            page = pages.Unreached(system=shown, why=self.fleet.unreached.get(shown, "not open"))
        else:
            shown, actions = runtime.system.name, self._actions(runtime)
            page = spec.make(runtime, actions, clock=prefs.clock, **_from_url(spec))
        if isinstance(page, pages.Reads):
            page.read()  # local and quick: in the first answer, whose preview then holds it
        else:
            if isinstance(page, pages.Recalls):
                page.recall()  # the last read's copy, in the first answer
            pn.state.onload(page.reload)
        if isinstance(page, pages.Refreshes) and page.refresh_every_ms:
            _every(page.refresh, page.refresh_every_ms)
        if isinstance(page, pages.Closes):
            pn.state.on_session_destroyed(lambda _: _close(page))
            _close_with_its_tab(page)
        return self._frame(page, spec, prefs, actions, shown, chosen)

    def _actions(self, runtime: Runtime | None) -> Actions | None:
        """What this session's user may do: a signed-in user's groups' roles until their session ends, or
        the local role (a password login, a loopback console without one)."""
        if runtime is None:
            return None
        actor = _actor()
        if self.oidc is None:
            return runtime.actions(actor)
        session = self.oidc.session_of((pn.state.cookies or {}).get(SESSION_COOKIE))
        if session is None:  # ended since Bokeh let its request in: nothing may be done
            return runtime.actions(actor, Grants(()), datetime.now(timezone.utc))
        groups = session.groups  # their roles as the roles file says now, at every action: a change holds at once
        return runtime.actions(Actor(session.user, actor.address, actor.agent),
                               lambda: runtime.roles.for_groups(groups),
                               datetime.fromtimestamp(session.expires, timezone.utc))

    def _frame(self, page: Any, spec: pages.Page, prefs: Prefs, actions: Actions | None, shown: str | None,
               chosen: str | None) -> Frame:
        if spec.in_the_url and self.url_state and not isinstance(page, pages.Unreached):  # asking makes one
            if (location := pn.state.location) is not None:
                location.sync(page, spec.in_the_url)  # the page was made with the URL's choices; now kept in step
        nav = {p.path: p.title for p in pages.TABLE if p.title and not (self.read_only and p.changes_the_server)}
        signed_in = self.oidc is not None or bool(pn.state.user)
        who = Who(actions.actor.user, actions.grants.names, "/logout" if signed_in else None) if actions else None
        systems = None
        if self.fleet.several:
            systems = Systems(tuple(self.fleet.names), shown, chosen, across=spec.across is not None)
            if shown is not None:
                name_the_system(page, shown)
        frame = Frame(page, nav, spec.path, lambda: pages.badges(self.fleet, shown, actions), prefs, who, systems)
        attach(pn.state.curdoc, static_html(frame))  # what the page holds, painted before the scripts run
        _every(frame.refresh)
        return frame


def _every(redraw: Any, period: int = REDRAW_EVERY_MS) -> None:
    """Call `redraw` every `period` ms in this session, until the session ends."""
    timer = pn.state.add_periodic_callback(redraw, period=period)
    pn.state.on_session_destroyed(lambda _: timer.stop())


def _close_with_its_tab(page: Any) -> None:
    """Bokeh ends a session only a while after its browser left (15 s and more): what the page runs (a
    search, a reader) stops as soon as the browser's connection it had is gone."""
    context = pn.state.curdoc.session_context if pn.state.curdoc else None
    seen: list[bool | None] = [False]

    def check() -> None:
        session = getattr(context, "_session", None)
        if session is None or seen[0] is None:
            return
        if session.connection_count:
            seen[0] = True
        elif seen[0]:
            seen[0] = None  # closed once
            _close(page)

    _every(check, TAB_CHECK_MS)


def _close(page: Any) -> None:
    closed = page.close()
    if inspect.isawaitable(closed):
        asyncio.ensure_future(closed)


def _from_url(spec: pages.Page) -> dict[str, Any]:
    """The page's choices as its URL gives them, to make the page with (hostile: a value that does not
    fit its type is left out)."""
    found = {}
    for name, arg in spec.in_the_url.items():
        if value := _arg(arg):
            try:
                found[name] = pages.URL_TYPES[name](value)
            except ValueError:  # InvalidNameError is one
                continue
    return found


def _actor() -> Actor:
    """Who this session is, for the audit trail: the login name ("local" on a console without one),
    the browser's address and user agent."""
    context = pn.state.curdoc.session_context if pn.state.curdoc else None
    request = getattr(context, "request", None)  # a server's session has one
    agent = request.headers.get("User-Agent", "") if request else ""
    return Actor(pn.state.user or "local", getattr(request, "remote_ip", "") or "", agent if isinstance(agent, str) else "")


def _prefs() -> Prefs:
    prefs = Prefs.from_cookies(pn.state.cookies or {})
    prefs.apply()
    return prefs


def _arg(name: str) -> str:
    values = pn.state.session_args.get(name) or [b""]
    return values[0].decode(errors="replace")


def serve(settings: Settings) -> None:
    web, access = settings.web, settings.access
    check_exposure(web.address, web.basic_auth, web.insecure, access.oidc)
    pn.extension("tabulator", inline=True, notifications=False)
    loop = IOLoop.current()

    def prepare(runtime: Runtime) -> None:
        runtime.live  # following the event log before the first session arrives
        runtime.keep_open()
        runtime.read_ahead(default_since())  # a first visit's first answer has a copy too

    async def open_fleet() -> Fleet:
        # Under `up`, a failed start is retried; without an event key the pages say so and follow once it is made.
        fleet = Fleet(settings)  # a systems file with an error stops the start, with its line
        check_files(settings)  # so do masking and roles files: never shown unmasked
        await fleet.open(prepare)
        return fleet

    if access.oidc_api_audience and not access.oidc:
        raise ConfigError("--oidc-api-audience takes the access tokens of the provider --oidc-issuer names: give both")
    url_state = ":" not in web.address
    fleet = loop.run_sync(open_fleet)
    from console.api.app import make_api
    from console.api.bridge import MAX_REQUEST_BODY, AsgiHandler
    from console.api.docs import DocsHandler
    from console.api.oidc_tokens import AccessTokens
    from console.api.tokens import TokenStore

    oidc, cookie_secret, access_tokens = None, secrets.token_hex(32), None
    if access.oidc:
        provider = loop.run_sync(lambda: Provider.discover(access))
        oidc = OidcAuth(provider, fleet.roles, cookie_secret, settings.alerting.console_url)
        if access.oidc_api_audience:
            access_tokens = AccessTokens(provider, access.oidc_api_audience)
    app = App(fleet, url_state, oidc)
    api = make_api(fleet, TokenStore(settings.data.data_dir), access_tokens)
    auth: dict[str, Any] = ({"auth_provider": oidc} if oidc else
            {"auth_provider": GuardedBasicAuth(web.basic_auth, settings.alerting.console_url)} if web.basic_auth
            else {})
    server = pn.io.server.get_server(
        # Choices live in the URL (a link reproduces what the sender saw), except on an IPv6 address:
        # Panel's Location cannot parse its Host header ("[::1]:8050"); the pages still read their arguments.
        app.routes(), address=web.address, port=web.port, loop=loop, show=False, start=False,
        location=url_state,
        websocket_origin=websocket_origins(web.address, web.port),
        **({**auth, "cookie_secret": cookie_secret} if auth else {}),
        title="JetStream Batch Console",
        http_server_kwargs={"max_body_size": MAX_REQUEST_BODY},  # past it, a request is refused before it is read
        # the API beside the pages, on their port: its own tokens, never the pages' cookies
        extra_patterns=[(r"/api/v1/docs", DocsHandler, {"app": api}), (r"/api/v1/.*", AsgiHandler, {"app": api}),
                        *mcp_patterns(api, settings, loop)],
    )
    allow_ipv6_origin(server, web.address)
    print(f"serving on http://{host_in_url(web.address)}:{server.port}/", flush=True)
    server.start()
    loop.start()
