"""The History page: what the analytics job wrote to SQLite, over a date range, with a CSV download."""

from __future__ import annotations

import html
import io
from datetime import date, datetime, time, timedelta, timezone
from urllib.parse import quote
from typing import Any, cast

import pandas as pd
import panel as pn
import param
from bokeh.models import ColumnDataSource, DataRange1d, HoverTool, Range1d
from bokeh.models.annotations import Title
from bokeh.plotting import figure
from bokeh.transform import dodge

from console.commands import ExportTable
from console.domain.display import Clock, count
from console.domain.events import UNKNOWN_STREAM, WHY_UNKNOWN
from console.domain.systems import domain_name
from console.domain.wire import stream_name_problem
from console.export import FORMATS
from console.queries.history import HISTORY_TABLES
from console.ui.controls import download, exports, permitted, refusals
from console.ui.formatting import (
    Clocked,
    clock_axis,
    ids_by_slot,
    outside,
    shown,
    stacked,
    stacked_bars,
    tabulator,
)


def in_system(system: str | None) -> str:
    """The query argument that keeps a link on one NATS system ("" for the one system of a console)."""
    return f'&system={quote(system, safe="")}' if system else ""


def incident_link(batch_id: str | None, system: str | None = None) -> str:
    """An escaped link to the incident view, for Tabulator's html formatter."""
    if not batch_id:
        return ""
    return f'<a href="/incident?batch={quote(batch_id, safe="")}{in_system(system)}">investigate</a>'


def stream_cell(stream: str | None, probable: str | None = None, system: str | None = None) -> str:
    """A stream name for an html cell: a link to its page, escaped; the unknown one says why it is
    unknown on hover, and the stream its publisher's connection last published to, as probable."""
    if not stream or stream == UNKNOWN_STREAM:
        unknown = f'<span title="{html.escape(WHY_UNKNOWN)}">{UNKNOWN_STREAM}</span>'
        if probable and stream_name_problem(probable) is None:
            why = "the stream this publisher's connection last published a batch to"
            return f'{unknown} · <span title="{why}">probably</span> {stream_cell(probable, system=system)}'
        return unknown
    if stream_name_problem(stream) is not None:  # "(collector)", "other": not a stream, no page
        return html.escape(stream)
    return f'<a href="/stream?name={quote(stream, safe="")}{in_system(system)}">{html.escape(stream)}</a>'


def wall(moments: Any, clock: Clock) -> list[Any]:
    """Times as the reader's clock reads them, for a plot's axis (Bokeh draws every time as UTC): the
    same instants, written in the clock's zone."""
    if clock.is_utc:
        return list(moments)
    stamps = (pd.Timestamp(t) for t in moments)
    return [(t if t.tzinfo else t.tz_localize(timezone.utc)).tz_convert(clock.zone).tz_localize(None) for t in stamps]


def _hours(start: datetime, end: datetime) -> pd.DatetimeIndex:
    """The UTC hours the history's rows are counted by, over [start, end) (a day of a zone half an hour
    off UTC begins inside one)."""
    return pd.date_range(start.replace(minute=0, second=0, microsecond=0), end, freq="h", inclusive="left",
                         tz=timezone.utc)


def hourly_bars(frame: pd.DataFrame, start: datetime, end: datetime, lost: pd.DataFrame | None = None,
                clock: Clock = Clock()) -> dict[str, list[Any]]:
    """One column per reason over every hour of the range (missing hours are zeros), and the first
    batch ids of each hour from `lost` (time, batch_id) for the tooltips."""
    hours = _hours(start, end)
    wide = (frame.astype({"batches": float}).pivot_table(index="hour", columns="reason", values="batches", aggfunc="sum")
            .reindex(hours).fillna(0))
    pairs = [] if lost is None else zip(lost["time"], lost["batch_id"])
    ids = ids_by_slot(((t.to_pydatetime(), b) for t, b in pairs), hours[0] if len(hours) else start,
                      timedelta(hours=1), len(hours))
    return stacked(wall(hours, clock), {reason: list(wide[reason]) for reason in wide.columns}, ids)


def data_extent(*hours: pd.Series, now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """From an hour before the first hour with data to an hour after the last, never past the hour now
    ends: the x range a plot shows."""
    found = pd.concat([h for h in hours if len(h)]) if any(len(h) for h in hours) else None
    if found is None:
        return None
    this_hour = (now or datetime.now(timezone.utc)).replace(minute=0, second=0, microsecond=0)
    return found.min() - timedelta(hours=1), min(found.max() + timedelta(hours=2), this_hour + timedelta(hours=1))


def gap_lines(frame: pd.DataFrame, start: datetime, end: datetime, clock: Clock = Clock()) -> dict[str, list[Any]]:
    """Gaps and lost messages per hour (bars), the missing hours zeros, no hour after the current one."""
    end = min(end, datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1))
    hours = _hours(start, end)
    wide = frame.groupby("hour")[["gaps", "lost"]].sum().reindex(hours).astype(float).fillna(0)  # systems summed
    return {"t": wall(hours, clock), "gaps": [int(v) for v in wide["gaps"]], "lost": [int(v) for v in wide["lost"]]}


PLOT_TITLES = ("Abandoned batches per hour, by reason", "Fast-ingest gaps and lost messages per hour")


def blind_windows_text(windows: pd.DataFrame, clock: Clock = Clock()) -> str:
    """A warning for each window in which the server may have dropped advisories unseen (escaped)."""
    if not len(windows):
        return ""
    lines = [f"- **capture interrupted from {clock.when(row.start)} to {clock.when(row.end)}**: losses in this window "
             f"may be missing ({html.escape(str(row.reason or ''))})" for row in windows.head(20).itertuples()]
    more = f"\n- and {count(len(windows) - 20)} more (download capture_interruptions)" if len(windows) > 20 else ""
    return "\n".join(lines) + more


CSV_TABLES = HISTORY_TABLES


def consumers_behind(hourly: pd.DataFrame, top: int = 50) -> pd.DataFrame:
    """Each consumer over the dates shown: its longest lag, the most that waited, the hours it was read and
    the reads that found it stalled; the most behind first."""
    if hourly.empty:
        return pd.DataFrame()
    keys = [c for c in ("system", "stream", "consumer") if c in hourly]
    found = hourly.groupby(keys, as_index=False).agg(
        longest_lag_s=("max_lag_seconds", "max"), most_pending=("max_pending", "max"), hours=("hour", "nunique"),
        stalled_reads=("stalled_reads", "sum"))
    found["longest_lag_s"] = found["longest_lag_s"].round(1)
    return found.sort_values(["longest_lag_s", "most_pending"], ascending=False, ignore_index=True).head(top)


CONTEXT_COLUMNS = ("leader_elections", "stream_updates", "other_abandonments", "gaps_nearby")
NOT_COUNTED = "…"  # a provisional row's context: not counted yet, which 0 would misstate


def ledger_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The ledger for the eye: the context cells of a row the analytics job has not counted yet (flagged
    provisional, or with no count: a row read from another system's tables, a table of an older job) say
    so, never "NaN"; the flag itself goes (the cells say it)."""
    out = frame.drop(columns=["provisional"], errors="ignore")
    if "domain" in out and not out["domain"].map(lambda d: isinstance(d, str) and bool(d)).any():
        out = out.drop(columns=["domain"])  # no leaf domain in these rows: no empty column at 1280 px
    marked = (frame["provisional"].fillna(True).astype(bool).to_numpy() if "provisional" in frame
              else [False] * len(frame))
    for column in CONTEXT_COLUMNS:
        if column in out:
            out[column] = [NOT_COUNTED if m or _missing(v) else str(int(v)) if isinstance(v, float) else str(v)
                           for m, v in zip(marked, out[column])]
    return out


# at 1280 px, in view (a system first, where several systems' ledgers are read as one)
DECIDED_ON = ("system", "time", "stream", "reason", "kind", "investigate", "publisher", "batch_id")


def decisions_first(frame: pd.DataFrame) -> pd.DataFrame:
    """The ledger's columns an operator decides on first (what was lost, why, by whom, where to look), the
    context after: at 1280 px "investigate" and the publisher were past the table's 2,228 px edge."""
    first = [c for c in DECIDED_ON if c in frame]
    return frame[first + [c for c in frame.columns if c not in first]]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value is pd.NA


def provisional_text(frame: pd.DataFrame) -> str:
    n = int(frame["provisional"].sum()) if "provisional" in frame else 0
    return (f". {count(n)} of the lost batches came in since the job's last run: their context ({NOT_COUNTED}) is "
            "counted at its next" if n else "")


def freshness_text(position: tuple[int, datetime] | None, live_seq: int, clock: Clock) -> str:
    """"history up to <the job's last run>, N events behind Live", from the job's offset and Live's."""
    if position is None:
        return "_No analytics run yet: History fills once `batch-console analytics` has run._"
    seq, run_at = position
    n = live_seq - seq
    behind = f", {count(n)} event{'s' * (n != 1)} behind Live" if n > 0 else ", level with Live" if live_seq else ""
    return f"History up to {clock.when(run_at)} (event-log sequence {count(seq)}){behind}."


def _systems(frame: pd.DataFrame) -> list[str | None]:
    """Each row's system, for its links (several systems' History has a `system` column)."""
    return list(frame["system"]) if "system" in frame else [None] * len(frame)


def _streams(frame: pd.DataFrame) -> list[str]:
    return [stream_cell(s, system=system) for s, system in zip(frame["stream"], _systems(frame))]


def last_week() -> tuple[date, date]:
    today = datetime.now(timezone.utc).date()
    return today - timedelta(days=6), today


class HistoryPage(Clocked, pn.viewable.Viewer):
    """`page.dates = (first, last)` in a notebook redraws it, as picking the dates does."""

    refresh_every_ms = 2000  # the freshness line; the tables once a run has committed

    history = param.Parameter(doc="The history queries (console.storage.history.Reader); None when there are none",
                              precedence=-1)
    problem = param.String(default=None, allow_None=True, doc="Why there is no history, shown instead of it")
    dates = param.CalendarDateRange(default=None, doc="The days shown, first and last included (in the clock's zone)")
    summary = param.String(default="", doc="What the chosen dates hold, in one line")
    live_seq = param.Callable(default=None, doc="Returns the last event-log sequence Live has (0: none yet)")
    freshness = param.String(default="", doc="How far History reaches, and how far it trails Live")
    csv_table: param.Selector[str] = param.Selector(default=CSV_TABLES[0], objects=list(CSV_TABLES),
                                                    doc="The table the CSV download holds")
    export_format: param.Selector[str] = param.Selector(default="csv", objects=list(FORMATS),
                                   doc="The download's format (JSON lines and Parquet carry the filters that made it)")
    export = exports("a table")
    may = refusals()
    domain = param.String(default="", doc="Only this JetStream domain's lost batches (a leaf's) in the ledger below")

    def __init__(self, **params: Any) -> None:
        params.setdefault("dates", last_week())
        super().__init__(**params)
        self._range = pn.widgets.DateRangePicker.from_param(self.param.dates, name=f"dates ({self.clock.label})")
        self._summary = pn.pane.Markdown(self.param.summary)
        self._freshness = pn.pane.Markdown(self.param.freshness)
        self._bars = ColumnDataSource(hourly_bars(pd.DataFrame(columns=["hour", "reason", "batches"]),
                                                  *self._bounds(), clock=self.clock))
        self._gaps = ColumnDataSource(gap_lines(pd.DataFrame(columns=["hour", "gaps", "lost"]), *self._bounds(),
                                                clock=self.clock))
        # One explicit range for both plots: a DataRange1d would fit every zero-filled hour of the week.
        self._hours = Range1d(*wall(self._bounds(), self.clock))
        bars = figure(title=PLOT_TITLES[0], x_axis_type="datetime", height=260,
                      sizing_mode="stretch_width", toolbar_location=None, x_range=self._hours)
        stacked_bars(bars, self._bars, timedelta(hours=1), "%Y-%m-%d %H:00", self.clock.label)
        gaps = figure(title=PLOT_TITLES[1], x_axis_type="datetime", height=260,
                      sizing_mode="stretch_width", toolbar_location=None, x_range=self._hours)
        hour_ms = 3_600_000
        gaps.vbar(x=dodge("t", hour_ms * 0.3, range=self._hours), top="gaps", width=hour_ms * 0.4, color="orange",
                  source=self._gaps, legend_label="gaps")
        gaps.vbar(x=dodge("t", hour_ms * 0.7, range=self._hours), top="lost", width=hour_ms * 0.4, color="red",
                  source=self._gaps, legend_label="lost messages")
        cast(DataRange1d, gaps.y_range).start = 0
        outside(gaps)
        for plot in (bars, gaps):
            clock_axis(plot)
        self._plots = (bars, gaps)
        gaps.add_tools(HoverTool(tooltips=[("hour", f"@t{{%Y-%m-%d %H:00}} {self.clock.label}"), ("gaps", "@gaps"),
                                           ("lost messages", "@lost")], formatters={"@t": "datetime"}))
        table = dict(disabled=True, show_index=False, sizing_mode="stretch_width")
        self._streams = tabulator(pd.DataFrame(columns=["stream"]), height=220,
                                             formatters={"stream": {"type": "html"}}, **table)
        self._outcomes = tabulator(pd.DataFrame(), height=160, **table)
        self._stats = tabulator(pd.DataFrame(), height=160, **table)
        self._lost = tabulator(pd.DataFrame(), height=300,
                                          formatters={"investigate": {"type": "html"}, "stream": {"type": "html"}},
                                          frozen_columns=["system", "time", "stream"], widths={"publisher": 360},
                                          **table)
        self._blind = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._domain_said = pn.pane.Markdown("", align="end")
        self._maintenances = tabulator(pd.DataFrame(), height=160, widths={"outcome": 520}, **table)
        self._maintenances_title = pn.pane.Markdown("### Maintenances (drains and restarts the console did)",
                                                    visible=False)
        self._maintenances.visible = False
        self._consumers = tabulator(pd.DataFrame(), height=200, **table)
        self._consumers_title = pn.pane.Markdown("### Consumers most behind (the alerts part's reads, each minute)",
                                                 visible=False)
        self._consumers.visible = False
        self._csv_table = pn.widgets.Select.from_param(self.param.csv_table, name="table to download")
        self._format = pn.widgets.Select.from_param(self.param.export_format, name="format", width=100)
        self._download = pn.widgets.FileDownload(callback=self.download, filename="abandoned_batches.csv",
                                                 label="Download CSV", button_type="light")
        cannot = permitted([self._download], self.may(ExportTable))
        self._layout = pn.Column(
            pn.pane.Markdown("## History"), pn.Row(self._range, self._csv_table, self._format, self._download),
            pn.pane.Markdown(cannot, visible=bool(cannot)),
            self._freshness,
            self._summary, self._blind, self._maintenances_title, self._maintenances,
            self._consumers_title, self._consumers,
            pn.Row(pn.pane.Bokeh(bars, sizing_mode="stretch_width"), pn.pane.Bokeh(gaps, sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            pn.Row(pn.Column("### Top streams", self._streams, sizing_mode="stretch_width"),
                   pn.Column("### Fast-batch outcomes", self._outcomes, "### Mean time between abandonments",
                             self._stats, sizing_mode="stretch_width"), sizing_mode="stretch_width"),
            "### Abandoned batches",
            pn.pane.Markdown("Each batch's reason, publisher and incident first; its context (what happened around "
                             "it) to the right: the table scrolls sideways where it is wider than the page."),
            pn.Row(pn.widgets.TextInput.from_param(self.param.domain, name="only the losses of the domain",
                                                   placeholder="a leaf's JetStream domain", width=260),
                   self._domain_said),
            self._lost, sizing_mode="stretch_width")
        self._shown: dict[str, pd.DataFrame] = {}
        self._read_at: object = False  # (the job's position, the ledger's) the tables were read at
        self._on_csv_table()

    def _bounds(self) -> tuple[datetime, datetime]:
        """The chosen days' bounds, from the first's midnight to the one after the last, in the clock's
        zone (in UTC)."""
        first, last = cast(tuple[date, date], self.dates)  # never None: the parameter does not allow it
        start, end = (datetime.combine(day, time(), self.clock.zone).astimezone(timezone.utc)
                      for day in (first, last + timedelta(days=1)))
        return start, end

    def _days(self) -> tuple[str, str]:
        first, last = cast(tuple[date, date], self.dates)  # never None: the parameter does not allow it
        return f"{first:%Y-%m-%d}", f"{last:%Y-%m-%d}"

    def refresh(self) -> None:
        """For a timer: the freshness line (one row); the tables again only once an analytics run has
        committed since they were read (a page left open while History fills must not say "0")."""
        if self.history is None:
            return
        position = self.history.ledger_position()
        if position != self._read_at:
            self.read(position)
        else:
            self._say_freshness(position)

    async def reload(self) -> None:
        self.read()

    def _say_freshness(self, position: Any) -> None:
        self.freshness = freshness_text(position[0], self.live_seq() if self.live_seq else 0, self.clock)

    def read(self, position: Any = None) -> None:
        """What the chosen dates hold, from SQLite (local and quick: the web reads it for its first answer);
        `position`: the ledger's, just asked."""
        if self.history is not None:
            self._read_at = position if position is not None else self.history.ledger_position()
            self._say_freshness(self._read_at)
        if self.history is None:
            self.summary = f"**History unavailable**: {self.problem or 'no SQLite database'}"
            return
        start, end = self._bounds()
        h = self.history
        by_hour = h.abandonments_by_hour(start, end)
        gaps = h.gaps_by_hour(start, end)
        self._shown = {
            "abandonments_by_hour": by_hour,
            "abandonments_by_stream": h.abandonments_by_stream(start, end),
            "gaps_by_hour": gaps,
            "fast_outcomes": h.fast_outcomes(start, end),
            "abandoned_batches": h.abandoned_batches(start, end, **self._only_domain()),
            "capture_interruptions": h.capture_interruptions(start, end),
            "maintenances": h.maintenances(start, end),
            "consumer_lag_by_hour": h.consumer_lag_by_hour(start, end),
        }
        stats = h.stream_stats()
        with pn.io.hold():
            self._bars.data = hourly_bars(by_hour, start, end, self._shown["abandoned_batches"], self.clock)
            self._gaps.data = gap_lines(gaps, start, end, self.clock)
            extent = data_extent(by_hour["hour"], gaps["hour"])  # where the data is, not a week of empty axis
            for plot, title, frame in zip(self._plots, PLOT_TITLES, (by_hour, gaps)):
                cast(Title, plot.title).text = title if len(frame) else f"{title}: none in these dates" + (
                    "" if self.history.job_position() else " (the analytics job has not run yet)")
            self._hours.start, self._hours.end = wall(extent or (start, end), self.clock)
            by_stream = shown(self._shown["abandonments_by_stream"], self.clock)
            by_stream["stream"] = _streams(by_stream)
            self._streams.value = by_stream
            self._outcomes.value = shown(self._shown["fast_outcomes"], self.clock)
            stats = shown(stats, self.clock, durations=("mean_seconds",))
            stats["stream"] = _streams(stats)
            first = [c for c in ("stream", "mean_seconds", "abandonments") if c in stats]  # the mean in view
            self._stats.value = stats[first + [c for c in stats.columns if c not in first]]
            lost = ledger_frame(shown(self._shown["abandoned_batches"], self.clock))
            lost["investigate"] = [incident_link(b, s) for b, s in zip(lost["batch_id"], _systems(lost))]
            lost["stream"] = _streams(lost)
            self._lost.value = decisions_first(lost)
            self._blind.object = blind_windows_text(self._shown["capture_interruptions"], self.clock)
            kept_up = shown(self._shown["maintenances"], self.clock)
            self._maintenances.value = kept_up
            self._maintenances.visible = self._maintenances_title.visible = bool(len(kept_up))
            behind = consumers_behind(self._shown["consumer_lag_by_hour"])
            self._consumers.value = behind
            self._consumers.visible = self._consumers_title.visible = bool(len(behind))
            total = int(by_hour["batches"].sum()) if len(by_hour) else 0
            lost_msgs = int(gaps["lost"].sum()) if len(gaps) else 0
            self.summary = (f"{count(total)} abandoned batches, {count(int(gaps['gaps'].sum()) if len(gaps) else 0)} gaps "
                            f"({count(lost_msgs)} messages lost) from {' to '.join(self._days())}"
                            + (f"; the plots show {self.clock.when(extent[0], seconds=False)} to "
                               f"{self.clock.when(extent[1], seconds=False)}, the hours with data" if extent else "")
                            + provisional_text(self._shown["abandoned_batches"]))

    def _only_domain(self) -> dict[str, str]:
        """The ledger's filter by domain: a name the wire takes, else none (and the page says why)."""
        wanted = self.domain.strip()
        if not wanted:
            self._domain_said.object = ""
            return {}
        try:
            named = domain_name(wanted)
        except ValueError as e:
            self._domain_said.object = f"**Not a domain:** {html.escape(str(e)[:160])}; every loss is shown"
            return {}
        self._domain_said.object = f"the losses of domain {html.escape(named)} alone"
        return {"domain": named}

    @param.depends("domain", watch=True)
    def _on_domain(self) -> None:
        self.read()

    @param.depends("dates", watch=True)
    def _on_dates(self) -> None:
        self.read()
        self._on_csv_table()

    @param.depends("csv_table", "export_format", watch=True)
    def _on_csv_table(self) -> None:
        first, last = (day.replace("-", "") for day in self._days())
        self._download.filename = f"{self.csv_table}-{first}-{last}.{self.export_format}"
        self._download.label = f"Download {FORMATS[self.export_format].label}"

    def frame(self, table: str) -> pd.DataFrame:
        """One of CSV_TABLES as shown for the chosen dates."""
        return self._shown.get(table, pd.DataFrame())

    def export_command(self) -> ExportTable:
        """The chosen table as shown for the chosen dates, in the chosen format, with the filters that made it."""
        first, last = self._days()
        frame = self.frame(self.csv_table)
        only = self._only_domain() if self.csv_table == "abandoned_batches" else {}
        return ExportTable(self.csv_table, f"{first}..{last}", self.export_format, frame.to_dict("records"),
                           list(frame.columns), {"table": self.csv_table, "from": first, "to": last, **only})

    async def download(self) -> io.BytesIO:
        return await download(self.export, self.export_command())

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
