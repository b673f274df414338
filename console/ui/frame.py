"""The frame around every page of the web app: a header with the console's name, the navigation,
the status as badges (NATS, collector, alerts firing) and two switches that persist in cookies:
light/dark and UTC/local time. Everything is served by the app itself: no font, script or style
sheet comes from anywhere else, so the console works on a machine with no way out."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, unquote

import panel as pn

from console.domain.display import Clock

THEME_COOKIE = "bc_theme"
ZONE_COOKIE = "bc_zone"
YEAR = 365 * 24 * 3600


@dataclass(frozen=True)
class Badge:
    label: str
    level: str  # ok | warn | bad | info
    banner: str | None = None  # a problem every page must show in full, under the header


@dataclass(frozen=True)
class Who:
    """Who the page is for: the user, their roles, and where they sign out (None: no sign-in)."""

    user: str
    roles: str
    sign_out: str | None = None

    def html(self) -> str:
        out = f' <a href="{html.escape(self.sign_out)}">Sign out</a>' if self.sign_out else ""
        return (f'<span class="who" aria-label="signed in as">{html.escape(self.user)} '
                f'<span class="roles">({html.escape(self.roles)})</span>{out}</span>')


@dataclass(frozen=True)
class Systems:
    """The NATS systems a console of several shows: their names, the one this page shows (None: all of
    them), the one the URL chose (kept on every link), and whether this page has an "all systems" view."""

    names: tuple[str, ...]
    shown: str | None
    chosen: str | None = None
    across: bool = False

    def html(self, current: str) -> str:
        here = ' aria-current="true"'
        links = [f'<a href="{html.escape(current)}"{here if self.shown is None else ""}>All systems</a>'] \
            if self.across else []
        links += [f'<a href="{html.escape(current)}?system={quote(name, safe="")}"{here if name == self.shown else ""}>'
                  f'{html.escape(name)}</a>' for name in self.names]
        return f'<nav aria-label="systems" class="systems">System: {" ".join(links)}</nav>'

    def keep(self, path: str) -> str:
        """A page's link that stays on the chosen system."""
        return f'{path}?system={quote(self.chosen, safe="")}' if self.chosen else path


@dataclass(frozen=True)
class Prefs:
    """What the reader chose, read from cookies (hostile: anything odd is the default)."""

    dark: bool = False
    clock: Clock = Clock()

    @classmethod
    def from_cookies(cls, cookies: dict[str, Any]) -> Prefs:
        zone = cookies.get(ZONE_COOKIE) or ""
        return cls(dark=cookies.get(THEME_COOKIE) == "dark", clock=Clock.named(unquote(zone)[:100]))

    def apply(self) -> None:
        """For this session, before its page is made (components take the theme they are made in)."""
        if self.dark:
            pn.config.theme = "dark"  # type: ignore[misc]  # Panel types its config read-only; setting it is its API
            if pn.state.curdoc is not None:
                pn.state.curdoc.theme = "dark_minimal"


CSS = """
:host { --bc-bg: #f6f7f9; --bc-fg: #1d2330; --bc-head: #1f3b5a; --bc-head-fg: #ffffff; --bc-link: #cfe3ff;
        --bc-ok: #2b8a3e; --bc-warn: #e67700; --bc-bad: #c92a2a; --bc-info: #5c6b80; }
:host(.dark) { --bc-head: #0b1624; --bc-link: #9cc3f5; }
header.bc { display: flex; flex-wrap: wrap; align-items: center; gap: .4rem 1.2rem; padding: .55rem 1rem;
            background: var(--bc-head); color: var(--bc-head-fg); border-radius: 6px;
            font-size: clamp(14px, 0.55vw + 10px, 26px); }
header.bc .name { font-weight: 700; font-size: 1.15em; letter-spacing: .01em; }
header.bc nav { display: flex; flex-wrap: wrap; gap: .2rem .9rem; }
header.bc nav a { color: var(--bc-link); text-decoration: none; padding: .1rem .2rem; border-bottom: 2px solid transparent; }
header.bc nav a[aria-current="page"] { color: var(--bc-head-fg); border-bottom-color: var(--bc-head-fg); }
header.bc .badges { display: flex; flex-wrap: wrap; gap: .35rem; margin-left: auto; }
header.bc .badge { padding: .12rem .55rem; border-radius: 999px; font-size: .85em; font-weight: 600; color: #fff; }
header.bc .badge.ok { background: var(--bc-ok); } header.bc .badge.warn { background: var(--bc-warn); }
header.bc .badge.bad { background: var(--bc-bad); } header.bc .badge.info { background: var(--bc-info); }
div.bc-banner { margin-top: .4rem; padding: .5rem 1rem; border-radius: 6px; background: var(--bc-bad); color: #fff;
                font-weight: 600; }
header.bc .who { font-size: .9em; } header.bc .who a { color: var(--bc-link); margin-left: .4rem; }
header.bc .who .roles { opacity: .8; }
header.bc nav.systems a { color: var(--bc-link); margin-left: .3rem; }
header.bc nav.systems a[aria-current="true"] { color: var(--bc-head-fg); font-weight: 700; text-decoration: underline; }
header.bc button { font: inherit; font-size: .85em; background: transparent; color: var(--bc-head-fg);
                   border: 1px solid var(--bc-link); border-radius: 4px; padding: .1rem .5rem; cursor: pointer; }
"""


DARK_TABLE_LINKS = ".tabulator-cell a { color: #9cc3f5; }"


def _switch_script(cookie: str, value_js: str) -> str:
    return (f"document.cookie='{cookie}='+encodeURIComponent({value_js})+'; path=/; max-age={YEAR}; samesite=strict';"
            "location.reload()")


def badges_html(badges: list[Badge]) -> str:
    return "".join(f'<span class="badge {b.level}" role="status">{html.escape(b.label)}</span>' for b in badges)


def header_html(nav: dict[str, str], current: str, badges: list[Badge], prefs: Prefs, who: Who | None = None,
                systems: Systems | None = None) -> str:
    here = ' aria-current="page"'
    keep = systems.keep if systems is not None else (lambda path: path)
    links = "".join(f'<a href="{html.escape(keep(path))}"{here if path == current else ""}>{html.escape(name)}</a>'
                    for path, name in nav.items())
    theme_to = "light" if prefs.dark else "dark"
    zone_to = ("'UTC'" if not prefs.clock.is_utc else "Intl.DateTimeFormat().resolvedOptions().timeZone")
    zone_label = "Times: UTC" if prefs.clock.is_utc else f"Times: {html.escape(prefs.clock.label)}"
    return (
        f'<header class="bc" role="banner"><span class="name">JetStream Batch Console</span>'
        f'<nav aria-label="pages">{links}</nav>{systems.html(current) if systems is not None else ""}'
        f'<span class="badges">{badges_html(badges)}</span>'
        f'{who.html() if who else ""}'
        f'<button type="button" aria-label="switch to {theme_to} theme" '
        f'onclick="{html.escape(_switch_script(THEME_COOKIE, repr(theme_to)))}">{"Light" if prefs.dark else "Dark"}</button>'
        f'<button type="button" aria-label="switch times to {"local time" if prefs.clock.is_utc else "UTC"}" '
        f'onclick="{html.escape(_switch_script(ZONE_COOKIE, zone_to))}">{zone_label}</button></header>'
        + "".join(f'<div class="bc-banner" role="alert">{html.escape(b.banner)}</div>' for b in badges if b.banner)
    )


class Frame(pn.viewable.Viewer):
    """A page in the frame; `refresh()` redraws the badges (the web app calls it every few seconds)."""

    def __init__(self, page: Any, nav: dict[str, str], current: str, badges: Callable[[], list[Badge]], prefs: Prefs,
                 who: Who | None = None, systems: Systems | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # param's constructor has no types
        self.badges, self.nav, self.current, self.prefs, self.who = badges, nav, current, prefs, who
        self.systems = systems
        self._header = pn.pane.HTML(self._html(), sizing_mode="stretch_width", stylesheets=[CSS],
                                    css_classes=["dark"] if prefs.dark else [])
        if prefs.dark:
            for table in pn.Column(page).select(pn.widgets.Tabulator):
                table.theme = "midnight"
                table.stylesheets = [*table.stylesheets, DARK_TABLE_LINKS]
        self._layout = pn.Column(self._header, page, sizing_mode="stretch_width")

    def _html(self) -> str:
        return header_html(self.nav, self.current, self.badges(), self.prefs, self.who, self.systems)

    def refresh(self) -> None:
        self._header.object = self._html()

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
