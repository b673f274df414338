"""The Live page: lost batches as they happen, and the console's own health."""

from __future__ import annotations

import html
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, cast, TYPE_CHECKING

import pandas as pd
import panel as pn
import param
from bokeh.models import ColumnDataSource, Range1d
from bokeh.models.annotations import Title
from bokeh.palettes import Category10
from bokeh.plotting import figure

from console.domain.display import Clock, count, duration, md
from console.domain.events import WHY_UNKNOWN, EventKind
from console.domain.fast_tracker import UNTRACKED_SAID_PER_PREFIX
from console.domain.live_model import LiveModel, Sees
from console.domain.maintenance_record import MaintenanceRecord
from console.domain.reasons import in_order
from console.domain.systems import domain_name
from console.domain.wire import printable
from console.ui.formatting import WRAPPED, Clocked, clock_axis, ids_by_slot, stacked, stacked_bars, tabulator
from console.queries.live import SeenLive
from console.ui.history import incident_link, stream_cell

if TYPE_CHECKING:
    from console.broker.live_state import LiveState
    from console.domain.live_across import LiveAcross


def seen(model: Any, sees: Sees | None) -> Any:
    """The model as a reader limited to some streams sees it (`sees`), or whole."""
    return model if sees is None else SeenLive(model, sees)


COLUMNS = {"time": "object", "stream": "object", "batch_id": "object", "reason": "object", "kind": "object",
           "publisher": "object", "investigate": "object"}


def recent_frame(model: LiveModel | LiveAcross, limit: int = 100, clock: Clock = Clock(), stream: str | None = None,
                 by_system: bool = False, domain: str | None = None) -> pd.DataFrame:
    """Newest first (of one stream, when given; of one JetStream domain, when given); explicit dtypes so an
    empty frame streams like a full one. by_system: several systems' losses, each with its system (the
    second column)."""
    lost = model.newest_first(limit) if stream is None else model.lost_on(stream, limit)
    if domain is not None:
        lost = [b for b in lost if b.domain == domain]
    where = (lambda b: b.system) if by_system else (lambda b: None)
    rows = [{"time": clock.when(b.time), "system": b.system,
             "stream": stream_cell(b.stream, b.probable_stream, where(b)),
             "batch_id": b.batch_id or "",
             "reason": b.reason + (" (unverified)" if b.unverified else ""),
             "kind": b.kind, "publisher": b.publisher or "",
             "investigate": incident_link(b.batch_id, where(b)), "cluster": b.cluster or "",
             "during maintenance": b.maintenance or "", "domain": b.domain or ""} for b in lost]
    columns = _with_system(COLUMNS, by_system)
    for extra, shown in (("domain", any(b.domain for b in lost)),  # JetStream domains (leaf nodes): whose loss
                         ("cluster", any(b.cluster for b in lost)),  # a supercluster: where each loss happened
                         ("during maintenance", any(b.maintenance for b in lost))):
        if shown:
            columns = {**{k: v for k, v in columns.items() if k != "investigate"}, extra: "object",
                       "investigate": "object"}
    return pd.DataFrame(rows, columns=list(columns)).astype(columns)


def _with_system(columns: dict[str, str], by_system: bool, after: str | None = "time") -> dict[str, str]:
    """The columns, and of several systems the system's column after `after` (None: first)."""
    if not by_system:
        return columns
    if after is None:
        return {"system": "object", **columns}
    found: dict[str, str] = {}
    for name, dtype in columns.items():
        found[name] = dtype
        if name == after:
            found["system"] = "object"
    return found


ACTIVE_COLUMNS = {"batch_id": "object", "stream": "object", "seq": "int64", "acked_seq": "int64", "flow": "Int64",
                  "gap_mode": "object", "gaps": "int64", "lost": "int64", "state": "object"}
SLOW = "slow, cannot tell"  # silent past the batch timeout, but no ack was due by its own cadence
INTERVAL = timedelta(minutes=1)
INTERVALS = 60
FLOW_LINES = 10  # the most recently active batches get a line each


# A running fast batch's stream is not unknown, only not said yet: the server names it in the batch's last ack
NOT_YET = f'<span title="{html.escape(WHY_UNKNOWN)}">(named at its end)</span>'


def active_frame(model: LiveModel | LiveAcross, stream: str | None = None, by_system: bool = False) -> pd.DataFrame:
    """The active fast batches (of one stream, when given), the most recently heard from first."""
    rows = [{"system": b.system, "batch_id": b.batch_id,
             "stream": stream_cell(b.stream, system=b.system if by_system else None) if b.stream else NOT_YET, "seq": b.last_seq, "acked_seq": b.acked_seq,
             "flow": b.flow, "gap_mode": b.gap_mode or "", "gaps": b.gaps, "lost": b.lost, "state": SLOW if b.slow else ""}
            for b in model.active_newest_first() if stream is None or b.stream == stream]
    columns = _with_system(ACTIVE_COLUMNS, by_system, after=None)
    return pd.DataFrame(rows, columns=list(columns)).astype(columns)


def interval_data(model: LiveModel, now: datetime) -> dict[str, list[Any]]:
    """The stacked bars' rows (`stacked`) over the last INTERVALS minutes."""
    start = now - INTERVAL * INTERVALS
    slots = [start + INTERVAL * i for i in range(INTERVALS)]
    ids = ids_by_slot(((b.time, b.batch_id) for b in model.newest_first(limit=500)), start, INTERVAL, INTERVALS)
    return stacked(slots, model.per_interval(now, INTERVAL, INTERVALS), ids)


FLOW_SPAN = timedelta(minutes=2)  # the flow chart shows at least this much
MIN_WINDOW = timedelta(minutes=15)  # the bars show at least this much


def flow_title(model: LiveModel) -> str:
    if not model.active:
        return "Flow of active fast batches: none active now (the chart fills when a fast batch runs)"
    return f"Flow of {len(model.active)} active fast batch{'es' if len(model.active) != 1 else ''} (x: gaps)"


def flow_window(model: LiveModel, now: datetime) -> tuple[datetime, datetime]:
    """From the oldest point shown (at least FLOW_SPAN back) to now: clock times, never a sub-second axis."""
    points = [t for b in model.active_newest_first()[:FLOW_LINES] for t, _ in b.flow_points]
    return min([now - FLOW_SPAN, *points]), now


def flow_data(model: LiveModel, now: datetime | None = None) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(lines, gap markers) for the most recently active batches, each line held at its flow until `now`:
    a batch with one flow so far was a line of one point, which draws nothing (the title counted two
    batches over an empty chart)."""
    recent = model.active_newest_first()[:FLOW_LINES]

    def held(points: list[tuple[datetime, int]]) -> list[tuple[datetime, int]]:
        return points + [(now, points[-1][1])] if points and now is not None and now > points[-1][0] else points

    shown = [held(list(b.flow_points)) for b in recent]
    lines: dict[str, list[Any]] = {"xs": [[t for t, _ in points] for points in shown],
             "ys": [[f for _, f in points] for points in shown],
             "batch": [b.batch_id for b in recent],
             "color": [Category10[10][i % 10] for i in range(len(recent))]}
    marks: dict[str, list[Any]] = {"t": [], "flow": [], "lost": []}
    for b in recent:
        for t, _, lost in b.gap_points:
            marks["t"].append(t)
            marks["flow"].append(b.flow or 0)
            marks["lost"].append(lost or 0)
    return lines, marks


def notices_html(model: LiveModel, clock: Clock = Clock()) -> str:
    """What is not a counted loss but an operator must see: open atomic batches dropped unseen,
    fast batches refused for too many in flight, losses retracted. Escaped: it comes from the wire."""
    e = html.escape
    items = [f"<li><b>capture interrupted from {clock.when(start)} to {clock.when(end)}</b>: losses in this window may "
             f"be missing ({e(why)})</li>" for start, end, why in reversed(model.blind_windows)]
    items += [f"<li><b>{clock.when(w.time)}</b> {stream_cell(w.stream)}: "
              + (f"batch {e(w.batch_id or '')} copied split: " if w.kind is EventKind.COPY_SPLIT else "")
              + f"{e(w.detail or w.reason or '')}</li>" for w in reversed(model.warnings)]
    items += [f"<li><b>the meta group was rescued at {clock.when(r.time)}</b>: "
              f"{e((r.detail or '').split(':', 1)[-1])}, an unsafe recovery after losing its quorum (nats-server 2.15): "
              f"streams and consumers may be back in an older state</li>" for r in reversed(model.rescues)]
    whole = not isinstance(model, SeenLive)  # a role limited to some streams: not the ledger's count over all
    items += [maintenance_item(m, clock, whole) for m in reversed(list(model.maintenances.values())[-5:])]
    if model.rejected:
        refused = ", ".join(f"{stream_cell(s)} {n}" for s, n in model.rejected.most_common(10))
        items.append(f"<li>batches refused for too many in flight (429: 10211 fast, 10210 atomic): {refused}</li>")
    if model.retracted:
        items.append(f"<li>{model.retracted} reported loss(es) retracted: a later reply showed the batch was alive</li>")
    if model.collector is not None and model.collector.publisher_note:
        items.append(f"<li>{e(model.collector.publisher_note)}: give the collector a system account user (--system-creds, or --system-user and --system-password)</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def maintenance_item(m: MaintenanceRecord, clock: Clock, whole: bool = True) -> str:
    """A maintenance as a notice: under way, or its window and what the ledger said (`whole`: to a reader
    of every stream). Escaped: the event log is anyone's to write."""
    e = html.escape
    if m.end is None:
        return (f"<li><b>maintenance under way since {clock.when(m.start)}</b>: {e(m.label())}; a loss from then "
                f"on is marked in the table</li>")
    said = "the ledger cannot tell" if m.lost is None else f"{m.lost} batch(es) lost on the streams touched" + (
        f", {m.unexpected} not named before a step" if m.unexpected else "")
    return (f"<li><b>maintenance {clock.when(m.start)} to {clock.when(m.end)}</b>: {e(m.label())}"
            + (f"; {e(said)}" if whole else "") + "</li>")


def status_text(model: LiveModel, connection: str, problem: str | None, now: datetime, skipped: int = 0,
                alerts_firing: int = 0) -> str:
    fresh = model.freshness(now)
    status = model.collector
    state = model.collector_state(now)
    collector = {"silent": "collector SILENT", "alive": "collector alive"}.get(state) or \
        "collector UNHEALTHY: " + "; ".join((status.unhealthy if status else None) or ["its loops failed"])
    parts = [
        f"NATS {connection}",
        collector,
        "no events yet" if fresh is None else f"last event {duration(fresh)} ago",
        f"inputs rejected {count(status.rejected_total if status else 0)}",
    ]
    if alerts_firing:
        parts.append(f"ALERTS FIRING {count(alerts_firing)} (see Alerts)")
    if skipped:
        parts.append(f"event-log records skipped {count(skipped)} (malformed or not signed)")
    if status and status.unsaid_by_prefix:  # a flood of losses of batches never seen to start: likely forged
        most = max(status.unsaid_by_prefix.items(), key=lambda item: item[1])[0]
        parts.append(f"held back {count(sum(status.unsaid_by_prefix.values()))} replies of batches never seen to "
                     f"start (over {UNTRACKED_SAID_PER_PREFIX} a second from one inbox; most from {printable(most, 60)})")
    if status and (starved := _times((status.cpu or {}).get("left_idle_starved"))):
        parts.append(f"collector starved of CPU {starved}x (host saturated)")
    if status and (behind := _times((status.cpu or {}).get("took_back_behind"))):
        parts.append(f"collector fell behind the server {behind}x (a flood?) and took its CPU priority back")
    if problem:
        parts.append(problem)
    return " · ".join(parts)


def _times(value: object) -> int:
    """A count from the collector's status, or 0 for anything that is none."""
    return value if type(value) is int and value > 0 else 0


def _range(bounds: tuple[datetime, datetime]) -> Range1d:
    start, end = bounds
    return Range1d(start=start, end=end)


class LivePage(Clocked, pn.viewable.Viewer):
    """Counters by reason (5 min / 1 h), recent lost batches newest first, a status bar."""

    model = param.Parameter(doc="The process's live model (a LiveModel, or a LiveAcross of several systems')")
    by_system = param.Boolean(default=False, doc="Several systems: each loss and batch with its system")
    status = param.Callable(default=None, doc="(now) -> the status line; default: the one system's")
    notices = param.Callable(default=None, doc="(clock) -> the notices' HTML; default: the one model's")
    connection = param.Callable(default=lambda: "", doc="Returns the NATS connection state as text")
    problem = param.Callable(default=lambda: None, doc="Returns the live state's problem, if any")
    skipped = param.Callable(default=lambda: 0, doc="Returns how many event-log records the live state dropped")
    alerts_firing = param.Callable(default=lambda: 0, doc="Returns how many alerts fire now")
    refresh_ms = param.Integer(default=300, bounds=(100, 5000), doc="Push interval: a few Hz at most")
    domain = param.String(default="", doc="Only this JetStream domain's lost batches (a leaf's) in the table")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._version = -1
        self._domain_said = pn.pane.Markdown("", align="end")
        # shown where a loss names a leaf's domain, or one is asked for: a system without leaves has no use for it
        self._domain_row = pn.Row(pn.widgets.TextInput.from_param(self.param.domain, name="only the losses of the domain",
                                                                  placeholder="a leaf's JetStream domain", width=260),
                                  self._domain_said, visible=False)
        self.timer: Any = None  # the session's periodic refresh (Panel's PeriodicCallback), when made by `following`
        self._counters = pn.pane.Markdown(sizing_mode="stretch_width")
        self._status = pn.pane.Str("", sizing_mode="stretch_width",  # a long line (a starved host, firing alerts) wraps
                                   stylesheets=[f"pre {{ {WRAPPED} }}"])
        self._notices = pn.pane.HTML("", sizing_mode="stretch_width")
        self._table = tabulator(
            recent_frame(self.model, clock=self.clock, by_system=self.by_system, domain=self._only_domain()),
            disabled=True, show_index=False, sizing_mode="stretch_width",
            height=320, formatters={"investigate": {"type": "html"}, "stream": {"type": "html"},
                                    "publisher": {"type": "textarea"}},
            widths={"publisher": 330},  # wrapped: the link to each batch's Incident stays in view at 1280 px
        )
        self._active = tabulator(
            active_frame(self.model, by_system=self.by_system), disabled=True, show_index=False, sizing_mode="stretch_width", height=220,
            formatters={"stream": {"type": "html"}},
        )
        now = datetime.now(timezone.utc)
        self._bars = ColumnDataSource(interval_data(self.model, now))
        bars = figure(title="Lost batches per minute, by reason", x_axis_type="datetime", height=260,
                      sizing_mode="stretch_width", toolbar_location=None, x_range=_range(self._window(now)))
        stacked_bars(bars, self._bars, INTERVAL, "%H:%M")
        clock_axis(bars)
        self._bars_range = cast(Range1d, bars.x_range)
        lines, marks = flow_data(self.model, now)
        self._lines, self._marks = ColumnDataSource(lines), ColumnDataSource(marks)
        flows = figure(title=flow_title(self.model), x_axis_type="datetime", height=260,
                       sizing_mode="stretch_width", toolbar_location=None, x_range=_range(flow_window(self.model, now)))
        clock_axis(flows)
        self._flows = flows
        flows.multi_line(xs="xs", ys="ys", line_color="color", source=self._lines)
        flows.scatter(x="t", y="flow", marker="x", size=12, color="red", source=self._marks)
        self._layout = pn.Column(
            pn.pane.Markdown("## Lost batches, live"), self._counters, self._notices,
            pn.Row(pn.pane.Bokeh(bars, sizing_mode="stretch_width"), pn.pane.Bokeh(flows, sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            self._domain_row,
            self._table, pn.pane.Markdown("### Active fast batches"), self._active, self._status,
            sizing_mode="stretch_width",
        )
        self.refresh()

    def _window(self, now: datetime) -> tuple[datetime, datetime]:
        """The bars' x range: from a few minutes before the first loss of the hour (at least the last
        MIN_WINDOW) to now, so a few minutes of losses are not a sliver at the end of an empty hour."""
        hour_ago = now - INTERVAL * INTERVALS
        first = min((b.time for b in self.model.newest_first(limit=500) if b.time >= hour_ago), default=now)
        return max(hour_ago, min(first - INTERVAL * 5, now - MIN_WINDOW)), now

    def _only_domain(self) -> str | None:
        """The table's filter by domain: a name the wire takes, else none (and the page says why)."""
        wanted = self.domain.strip()
        if not wanted:
            self._domain_said.object = ""
            return None
        try:
            named = domain_name(wanted)
        except ValueError as e:
            self._domain_said.object = f"**Not a domain:** {html.escape(str(e)[:160])}; every loss is shown"
            return None
        self._domain_said.object = f"the losses of domain {html.escape(named)} alone"
        return named

    @param.depends("domain", watch=True)
    def _on_domain(self) -> None:
        self._version = -1  # the table again, whatever the model's version
        self.refresh()

    @classmethod
    def following(cls, state: LiveState, sees: Sees | None = None, **params: Any) -> LivePage:
        """A page on the process's live state, refreshed every `refresh_ms` in the current session; `sees`:
        of the streams a reader sees alone."""
        page = cls(model=seen(state.model, sees), connection=lambda: state.connection,
                   problem=lambda: state.key_problem or state.problem,
                   skipped=lambda: state.skipped, **params)
        page.timer = pn.state.add_periodic_callback(page.refresh, period=page.refresh_ms)
        return page

    @classmethod
    def across(cls, states: Callable[[], dict[str, LiveState]], unreached: Callable[[], dict[str, str]],
               sees: Sees | None = None, **params: Any) -> LivePage:
        """A page on several systems' live states (those reached so far), each loss with its system; the
        status line says each system's state, and those not reached."""
        from console.domain.live_across import LiveAcross

        def status(now: datetime) -> str:
            lines = [f"{name}: " + status_text(state.model, state.connection, state.key_problem or state.problem, now,
                                               state.skipped) for name, state in states().items()]
            lines += [f"{name}: NOT REACHABLE ({why}); tried again meanwhile" for name, why in unreached().items()]
            return "\n".join(lines)

        def notices(clock: Clock) -> str:
            found = ((name, notices_html(seen(state.model, sees), clock)) for name, state in states().items())
            return "".join(f"<b>{html.escape(name)}</b>{said}" for name, said in found if said)

        page = cls(model=seen(LiveAcross(lambda: {name: state.model for name, state in states().items()}), sees),
                   by_system=True,
                   status=status, notices=notices, **params)
        page.timer = pn.state.add_periodic_callback(page.refresh, period=page.refresh_ms)
        return page

    async def reload(self) -> None:
        self.refresh()

    def close(self) -> None:
        """The session's timer stops with the session."""
        if self.timer is not None:
            self.timer.stop()

    def refresh(self) -> None:
        now = datetime.now(timezone.utc)
        with pn.io.hold():
            if self.status is None:
                self._status.object = status_text(self.model, self.connection(), self.problem(), now, self.skipped(),
                                                  self.alerts_firing())
            else:
                firing = self.alerts_firing()
                self._status.object = self.status(now) + (f"\nALERTS FIRING {count(firing)} (see Alerts)" if firing else "")
            if self.model.version == self._version:
                return
            self._version = self.model.version
            five = self.model.counts_by_reason(now, timedelta(minutes=5))
            hour = self.model.counts_by_reason(now, timedelta(hours=1))
            cells = " | ".join(f"**{md(r)}** {count(five.get(r, 0))} / {count(hour.get(r, 0))}"
                               for r in in_order(hour) if hour.get(r))
            self._counters.object = f"Last 5 min / 1 h: {cells or 'no lost batches in the last hour'}"
            self._notices.object = (self.notices(self.clock) if self.notices is not None else
                                    notices_html(self.model, self.clock))
            self._table.value = recent_frame(self.model, clock=self.clock, by_system=self.by_system,
                                             domain=self._only_domain())
            self._domain_row.visible = bool(self.domain) or any(b.domain for b in self.model.newest_first(500))
            self._active.value = active_frame(self.model, by_system=self.by_system)
            self._bars.data = interval_data(self.model, now)
            self._bars_range.start, self._bars_range.end = self._window(now)
            self._lines.data, self._marks.data = flow_data(self.model, now)
            cast(Title, self._flows.title).text = flow_title(self.model)
            flows_range = cast(Range1d, self._flows.x_range)
            flows_range.start, flows_range.end = flow_window(self.model, now)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
