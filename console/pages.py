"""The pages: one table (TABLE) from which the web's routes and the notebook console are made, and
the one place that says what each page is given over a runtime. Adding a page is an entry here and
a view of its own in console/ui.

A page is a param-driven view (what the user picks and what it shows are params) that keeps one
protocol:
- `async reload()`: reads what it shows (the web calls it once the page is in the browser);
- `read()`, when it has one: its reads are local and quick (SQLite, files), so the web makes them
  before its first answer, whose preview then holds them, instead of reload;
- `recall()`, when it has one (and no read): what the process last read for it (its time said), for
  the first answer, before reload reads it again;
- `refresh()` every `refresh_every_ms`, when it has them: a redraw of what a shared state holds;
- `close()` (sync or async), when it has one: at the session's end."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol, TYPE_CHECKING, runtime_checkable

import panel as pn

from console.actions import Actions
from console.commands import COMMANDS, RunProbe, RunSearch
from console.broker import names
from console.domain.display import count, md
from console.domain.maintenance import node_name
from console.domain.systems import domain_name
from console.queries.incidents import advice
from console.queries import fleet as read_fleet
from console.fleet import Fleet
from console.queries.alerts import SeenAlerts
from console.queries.consumers import SeenConsumers
from console.queries.reads import FleetReads, SystemReads
from console.queries.sight import Sight
from console.queries.streams import StreamReads
from console.runtime import Runtime
from console.ui.alerts import AlertsPage
from console.ui.audit import AuditPage
from console.ui.budgets import BudgetsPage
from console.ui.canary import CanaryPage
from console.ui.checks import ChecksPage
from console.ui.conformance import ConformancePage
from console.ui.consumers import ConsumersPage
from console.ui.search import SearchPage
from console.ui.frame import Badge
from console.ui.history import CSV_TABLES, HistoryPage
from console.ui.incident import IncidentPage
from console.ui.live import LivePage, seen
from console.ui.maintenance import MaintenancePage
from console.ui.probe import ProbePage
from console.ui.replay import ReplayPage
from console.ui.stream import StreamPage, replay_link
from console.ui.streams import StreamsPage

if TYPE_CHECKING:
    from console.probe import ProbeOptions, ProbeReport


class View(Protocol):
    """Every page: it reads what it shows when asked (the web asks once the page is in the browser)."""

    async def reload(self) -> None: ...


@runtime_checkable
class Reads(Protocol):
    """A page whose reads are local and quick: made before the first answer, instead of reload."""

    def read(self) -> None: ...


@runtime_checkable
class Recalls(Protocol):
    """A page that shows what the process last read for it (its time said) in the first answer."""

    def recall(self) -> None: ...


@runtime_checkable
class Refreshes(Protocol):
    """A page redrawn from a shared state every `refresh_every_ms`."""

    refresh_every_ms: int

    def refresh(self) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """A page that lets go of what it holds (a consumer, a search) at its session's end."""

    def close(self) -> None | Awaitable[None]: ...


@dataclass(frozen=True)
class Page:
    path: str
    title: str | None  # in the navigation; None: reached by links only (the stream page needs a stream)
    make: Callable[..., View]  # (runtime, actions: what its user may do, **params) -> the view
    in_the_url: dict[str, str] = field(default_factory=dict)  # the choices kept in its URL: param -> argument
    changes_the_server: bool = False  # left out in read-only mode
    # of several NATS systems, the page over all of them ((fleet, actions, **params) -> the view; the actions
    # of the first system open, whose audit trail records them), shown when the URL
    # names none; a page without one acts on one system (the URL's ?system=, or the first)
    across: Callable[..., View] | None = None


def _csv_table(name: str) -> str:
    if name not in CSV_TABLES:
        raise ValueError(f"not a table: {name[:50]!r}")
    return name


def _start_time(text: str) -> str:
    if len(text) > 64:
        raise ValueError("not a time")
    return text


def _label(text: str) -> str:
    if len(text) > 256 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("not a rule name")
    return text


def _action(text: str) -> str:
    if text not in COMMANDS:
        raise ValueError("not an action")
    return text


def _severity(text: str) -> str:
    if text not in ("critical", "warning", "info"):
        raise ValueError("not a severity")
    return text


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError("not a yes or no")
    return text.lower() in ("true", "1")


def _expression(text: str) -> str:
    if len(text) > 1000:
        raise ValueError("not an expression a search takes")
    return text


def _number(text: str) -> float:
    value = float(text)
    if not 0 < value < 1e12:  # also refuses nan and inf
        raise ValueError("not a limit")
    return value


def _int(text: str) -> int:
    if len(text) > 20:  # past int64: not a sequence
        raise ValueError("not a sequence")
    return int(text)


# Every value from the URL is checked by the wire's own rules before a page is made with it (a name
# that reaches a subject must never cost the process its connection); one that fails is left out.
URL_TYPES = {"start_seq": _int, "csv_table": _csv_table, "stream": names.stream,
             "consumer": names.consumer, "batch_id": names.batch_id, "start_time": _start_time, "rule": _label,
             "user": _label, "action": _action, "severity": _severity, "client": _label, "failing_only": _flag,
             "subject": _label, "end_seq": _int, "since": _start_time, "until": _start_time, "where": _expression,
             "newest_first": _flag, "max_scanned": _int, "max_matches": _int, "max_seconds": _number,
             "objective": _label, "node": node_name, "domain": domain_name}
SEARCH_PARAMS = ("stream", "subject", "start_seq", "end_seq", "since", "until", "where", "newest_first",
                 "max_scanned", "max_matches", "max_seconds")


def _sight(actions: Actions) -> Sight:
    """What the page's user is shown: the one rule of every face (console.queries.sight)."""
    return Sight(lambda: actions.grants)


def _admin(runtime: Runtime, actions: Actions) -> StreamReads:
    """The runtime's streams as the user sees them, reads only: another team's are absent, as if there were none."""
    return StreamReads(runtime.admin, _sight(actions).sees)


def _reads(runtime: Runtime, actions: Actions) -> SystemReads:
    """What the page's user reads of the runtime's system (console.queries.reads: the one rule applied there)."""
    return SystemReads(runtime, _sight(actions))


def _reads_across(fleet: Fleet, actions: Actions) -> FleetReads:
    return FleetReads(fleet, _sight(actions))


def live(runtime: Runtime, actions: Actions, **params: Any) -> LivePage:
    """Follows the runtime's live state; refreshed in the current session every refresh_ms. The alerts
    firing are counted once, in the frame's header (a second count in the status line told another number)."""
    return LivePage.following(runtime.live, sees=_sight(actions).limit, **params)


def streams(runtime: Runtime, actions: Actions, **params: Any) -> StreamsPage:
    return StreamsPage(admin=_admin(runtime, actions), limits=runtime.batch_limits, actions=actions, **params)


def stream(runtime: Runtime, actions: Actions, **params: Any) -> StreamPage:
    """One stream; `reload()` reads it from the server, `refresh()` redraws what the live model holds."""
    from console.decoders.rules import described

    sees = _sight(actions).limit
    return StreamPage(details=_admin(runtime, actions).stream, limits=runtime.batch_limits, server=runtime.admin.server,
                      model=seen(runtime.live.model, sees), history=_reads(runtime, actions).history(),
                      decoders=lambda name: described(runtime.decoders, name), run=actions.run, may=actions.allowed,
                      read_only=runtime.read_only, **params)


def replay(runtime: Runtime, actions: Actions, **params: Any) -> ReplayPage:
    return ReplayPage(admin=_admin(runtime, actions), actions=actions, payloads=runtime.payloads(actions.payloads),
                      **params)


def history(runtime: Runtime, actions: Actions, **params: Any) -> HistoryPage:
    return HistoryPage(history=_reads(runtime, actions).history(), problem=runtime.history_problem,
                       live_seq=lambda: runtime.live.last_seq,
                       export=actions.run, may=actions.allowed, **params)


def incident(runtime: Runtime, actions: Actions, **params: Any) -> IncidentPage:

    def to_replay(incident: Any) -> str | None:  # the batch's stream from the start of the incident's window
        return replay_link(incident.loss.stream, incident.start) if incident.loss.stream else None

    reads = _reads(runtime, actions)
    return IncidentPage(**{"find": reads.incident, "replay_link": to_replay, "advice": advice,
                           "payloads": runtime.payloads(actions.payloads), "verdicts": reads.verdicts,
                           "peek": seen(runtime.live.model, reads.sight.limit).find_lost,
                           "export": actions.run, "run": actions.run, "may": actions.allowed,
                           "read_only": runtime.read_only,
                           "console_url": runtime.settings.alerting.console_url or "", **params})


def probe(runtime: Runtime, actions: Actions, **params: Any) -> ProbePage:

    async def run(options: ProbeOptions, progress: Any = None) -> ProbeReport:
        return await actions.run(RunProbe(options, progress))

    return ProbePage(run=run, may=actions.allowed, **params)


def _alerts(view: Any, actions: Actions) -> SeenAlerts:
    """The alerts as the user sees them, whoever it is: a page never holds the view's writers."""
    return SeenAlerts(view, _sight(actions).limit or (lambda stream: True))


def alerts(runtime: Runtime, actions: Actions, **params: Any) -> AlertsPage:
    return AlertsPage(view=_alerts(runtime.alerts, actions), read_only=runtime.read_only, actions=actions, **params)


def audit(runtime: Runtime, actions: Actions, **params: Any) -> AuditPage:
    reads = _reads(runtime, actions)
    return AuditPage(trail=reads.audit, recent=reads.recent_audit, export=actions.run, may=actions.allowed, **params)


def budgets(runtime: Runtime, actions: Actions, **params: Any) -> BudgetsPage:
    reads = _reads(runtime, actions)  # the objectives whose streams the user sees, as the API's /budgets
    return BudgetsPage(statuses=reads.budgets, losses=lambda name: reads.spenders(name) or [],
                       problem=lambda: runtime.objectives_file.error, **params)


def maintenance(runtime: Runtime, actions: Actions, **params: Any) -> MaintenancePage:
    from console.broker.maintenance import server_names
    from console.domain.maintenance import Plan
    from console.maintain import MaintenanceDone, drain_node, maintenance_plan, restart_node

    async def drain(plan: Plan, progress: Callable[[str], None]) -> MaintenanceDone:
        return await drain_node(runtime, actions, plan.node, progress, evacuate=plan.evacuate is not None)

    async def restart(node: str, progress: Callable[[str], None]) -> MaintenanceDone:
        return await restart_node(runtime, actions, node, progress)

    async def plan_for(node: str, evacuate: bool) -> Plan:
        return await maintenance_plan(runtime, node, None, evacuate)

    return MaintenancePage(nodes=lambda: server_names(runtime.nc, runtime.system_nc), plan_for=plan_for,
                           drain=drain, restart=restart if runtime.settings.web.restart_command else None,
                           read_only=runtime.read_only, may=actions.allowed, **params)


def canary(runtime: Runtime, actions: Actions, **params: Any) -> CanaryPage:
    from console.services.canaries import canary_round, recent_canaries

    return CanaryPage(results=lambda: recent_canaries(lambda: runtime.nc, lambda: runtime.event_log),
                      run_round=lambda: canary_round(runtime.nc, runtime.event_log, runtime.settings.fleet.name, actions), read_only=runtime.read_only,
                      may=actions.allowed, **params)


def consumers(runtime: Runtime, actions: Actions, **params: Any) -> ConsumersPage:
    """Every consumer of the streams the user sees, judged against the reads this process made before (a
    sampler reads every 10 s while somebody looks, so a stall shows without a reload)."""
    seen = SeenConsumers(runtime.consumers, _sight(actions))
    runtime.consumers.sample()
    return ConsumersPage(consumers=seen.read, last=lambda stream: seen.seen(runtime.consumers.last, stream), run=actions.run, may=actions.allowed, read_only=runtime.read_only, **params)


def checks(runtime: Runtime, actions: Actions, **params: Any) -> ChecksPage:
    return ChecksPage(findings=_reads(runtime, actions).findings, **params)


def search(runtime: Runtime, actions: Actions, **params: Any) -> SearchPage:
    return SearchPage(run=lambda query, progress, cancelled: actions.run(RunSearch(query, progress, cancelled)),
                      export=actions.run, may=actions.allowed, **params)


def conformance(runtime: Runtime, actions: Actions, **params: Any) -> ConformancePage:
    """The Conformance page of what the user sees: another team's streams' example batches left out."""
    reads = _reads(runtime, actions)
    return ConformancePage(verdicts=reads.verdicts, recent=reads.recent_verdicts, **params)


def history_across(fleet: Fleet, actions: Actions, **params: Any) -> HistoryPage:
    """Every system's History, each row with its system (the plots sum them)."""
    _, problem = read_fleet.history(fleet.runtimes())
    return HistoryPage(history=_reads_across(fleet, actions).history(), problem=problem,
                       live_seq=lambda: sum(r.live.last_seq for r in fleet.runtimes().values()),
                       export=actions.run, may=actions.allowed, **params)


def checks_across(fleet: Fleet, actions: Actions, **params: Any) -> ChecksPage:
    """Every system's findings as its alerts part last evaluated them, each with its system."""
    return ChecksPage(findings=_reads_across(fleet, actions).findings, by_system=True, **params)


def audit_across(fleet: Fleet, actions: Actions, **params: Any) -> AuditPage:
    """Every system's audit trail, each record with its system and each chain checked on its own."""
    reads = _reads_across(fleet, actions)
    return AuditPage(trail=reads.audit, recent=reads.recent_audit, export=actions.run, may=actions.allowed, **params)


def alerts_across(fleet: Fleet, actions: Actions, **params: Any) -> AlertsPage:
    """Every system's alerts firing, sent and delivered, each with its system; the one rules file."""
    return AlertsPage(view=_alerts(fleet.alerts(), actions), read_only=fleet.read_only, actions=actions, **params)


def conformance_across(fleet: Fleet, actions: Actions, **params: Any) -> ConformancePage:
    """Every system's clients, each named with its system; a system whose log cannot be read is left out."""
    reads = _reads_across(fleet, actions)
    return ConformancePage(verdicts=reads.verdicts, recent=reads.recent_verdicts, **params)


def live_across(fleet: Fleet, actions: Actions, **params: Any) -> LivePage:
    """Every system's losses, each with its system; the status line says each system's state (the alerts
    firing are counted in the frame's header)."""
    return LivePage.across(lambda: {name: runtime.live for name, runtime in fleet.runtimes().items()},
                           lambda: dict(fleet.unreached), sees=_sight(actions).limit, **params)


class Unreached(pn.viewable.Viewer):
    """The page of a system not reached yet: what it is waiting for (every other system's pages go on)."""

    def __init__(self, system: str, why: str):
        super().__init__()  # type: ignore[no-untyped-call]  # param's constructor has no types
        self._said = pn.pane.Alert(f"System **{md(system)}** is not reachable yet ({md(why)}). The console tries "
                                   "it again in the background; reload this page, or pick another system above.",
                                   alert_type="danger")

    async def reload(self) -> None:
        pass

    def __panel__(self) -> pn.viewable.Viewable:
        return self._said


def badges(fleet: Fleet, shown: str | None = None, actions: Actions | None = None) -> list[Badge]:
    """The status the frame's header shows on every page: of the one system, or, of several, each
    system's in a word (one not reached in full, on every page) and the shown one's in detail. The
    alerts firing counted are those of the streams the page's user sees (`actions`)."""
    if not fleet.several:
        runtime = fleet.runtime()
        return _badges(runtime, actions) if runtime is not None else [Badge("NATS connecting", "bad")]
    found, firing, now = [], 0, datetime.now(timezone.utc)
    for name in fleet.names:
        runtime = fleet.runtime(name)
        if runtime is None:
            why = fleet.unreached.get(name, "not open")
            found.append(Badge(f"{name}: not reachable", "bad",
                               banner=f"system {name} is not reachable ({why}); tried again, the others are shown"))
            continue
        connection = runtime.live.connection
        if shown is not None:
            found.append(Badge(f"{name}: {connection}", "ok" if connection == "connected" else "bad"))
        else:  # "All systems": each system's collector beside its connection, the worst of the two its colour
            collector = runtime.live.model.collector_state(now)
            level = "bad" if connection != "connected" or collector == "silent" else \
                "ok" if collector == "alive" else "warn"
            found.append(Badge(f"{name}: {connection}, collector {collector}", level))
        firing += len(_firing(runtime, actions))
    runtime = fleet.runtime(shown) if shown is not None else None
    if runtime is not None:
        found += [b for b in _badges(runtime, actions) if not b.label.startswith("NATS ")]
        return found
    found.append(_firing_badge(firing))  # every system's, on "All systems"
    if fleet.read_only:
        found.append(Badge("read-only", "info"))
    return found


def _firing(runtime: Runtime, actions: Actions | None) -> list[Any]:
    return (runtime.alerts if actions is None else _alerts(runtime.alerts, actions)).firing()


def _badges(runtime: Runtime, actions: Actions | None = None) -> list[Badge]:
    now = datetime.now(timezone.utc)
    state = runtime.live
    connection = state.connection
    found = [Badge(f"NATS {connection}", "ok" if connection == "connected" else "bad")]
    if (problem := state.key_problem) is not None:
        found.append(Badge(f"EVENT KEY {'MISSING' if state.key_missing else 'WRONG'}", "bad", banner=problem))
    collector = state.model.collector_state(now)
    found.append(Badge(f"collector {collector}", {"silent": "bad", "alive": "ok"}.get(collector, "warn")))
    found.append(_firing_badge(len(_firing(runtime, actions))))
    if runtime.read_only:
        found.append(Badge("read-only", "info"))
    return found


def _firing_badge(firing: int) -> Badge:
    return Badge(f"{count(firing)} alert{'s' if firing != 1 else ''} firing", "bad" if firing else "ok")


TABLE = (
    Page("/", "Live", live, {"domain": "domain"}, across=live_across),
    Page("/streams", "Streams", streams, {"stream": "stream"}),
    Page("/consumers", "Consumers", consumers, {"stream": "stream"}),
    Page("/replay", "Replay", replay, {"stream": "stream", "consumer": "consumer", "start_seq": "start_seq",
                                       "start_time": "start_time", "batch_id": "batch_id"}),
    Page("/history", "History", history, {"csv_table": "table", "domain": "domain"}, across=history_across),
    Page("/incident", "Incident", incident, {"batch_id": "batch"}),
    Page("/alerts", "Alerts", alerts, {"rule": "rule"}, across=alerts_across),
    Page("/checks", "Checks", checks, {"severity": "severity", "stream": "stream"}, across=checks_across),
    Page("/budgets", "Budgets", budgets, {"objective": "objective"}),
    Page("/canary", "Canary", canary),
    Page("/search", "Search", search, {name: name for name in SEARCH_PARAMS}),
    Page("/conformance", "Conformance", conformance, {"client": "client", "failing_only": "failing"},
         across=conformance_across),
    Page("/probe", "Probe", probe, changes_the_server=True),
    Page("/maintenance", "Maintenance", maintenance, {"node": "node"}, changes_the_server=True),
    Page("/audit", "Audit", audit, {"user": "user", "action": "action", "stream": "stream"}, across=audit_across),
    Page("/stream", None, stream, {"stream": "name"}),
)
BY_PATH = {page.path: page for page in TABLE}
PAGES = {page.path: page.title for page in TABLE if page.title}  # the navigation: path -> title
