"""What tables show: times as the session's clock writes them (never a raw epoch), seconds as
durations; and what the plots share (legends beside them, hover tooltips with batch ids)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable

import pandas as pd
import panel as pn
import param
from bokeh.models import DatetimeTickFormatter, HoverTool
from bokeh.palettes import Category20
from bokeh.transform import dodge

from console.domain.display import Clock, duration
from console.domain.reasons import REASONS, in_order
from console.payloads import Payloads

# One color per reason, the ten strong ones first: the same on Live and History.
REASON_COLORS = dict(zip(REASONS, Category20[20][::2] + Category20[20][1::2]))
NEW_REASON_COLOR = "#7f7f7f"  # every reason a newer server gave, that this console does not know
STACK_COLUMNS = ("t", "bottom", "top", "batches", "reason", "color", "ids")


class Clocked(param.Parameterized):
    """A page that writes times: in UTC, or in the reader's zone (the frame's switch sets it)."""

    clock = param.ClassSelector(class_=Clock, default=Clock(), doc="How times are written", precedence=-1)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)  # type: ignore[no-untyped-call]  # param's constructor has no types


def coroutine(doc: str, **params: Any) -> param.Callable[Any]:
    """A parameter holding an async function to call. Never a reference: given one of no arguments,
    param would call it when the page is made, to see whether it is one, and log a failure to set the
    page's parameter to its result."""
    return param.Callable(allow_refs=False, doc=doc, **params)


def shows_payloads(page: param.Parameterized) -> Payloads:
    """The payload pipeline a page that shows payloads was made with: never without one (closed by
    default, so no page can show a message as stored by leaving it out)."""
    payloads = getattr(page, "payloads", None)
    if not isinstance(payloads, Payloads):
        raise TypeError(f"{type(page).__name__} shows payloads: it is made with payloads=Payloads(...)")
    return payloads


def shown(frame: pd.DataFrame, clock: Clock, durations: tuple[str, ...] = ()) -> pd.DataFrame:
    """A copy for the eye: every time column as text in the clock's zone, the named columns of
    seconds as durations."""
    out = frame.copy()
    for column in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[column]):
            out[column] = [clock.when(t.to_pydatetime()) if not pd.isna(t) else "" for t in out[column]]
        elif column in durations:
            out[column] = [duration(v) if not pd.isna(v) else "" for v in out[column]]
    return out


def put(table: Any, frame: pd.DataFrame) -> None:
    """Give a table a new frame only when it differs: a redraw on a timer sends nothing, and keeps the
    reader's scroll and selection, while nothing changed."""
    old = table.value
    if not (isinstance(old, pd.DataFrame) and list(old.columns) == list(frame.columns) and old.equals(frame)):
        table.value = frame


def outside(plot: Any, hides: bool = True) -> None:
    """The legend beside the plot area, never over the data; a click on an item hides its series when
    each item is a renderer of its own (`hides`)."""
    legend = plot.legend[0]
    plot.add_layout(legend, "right")
    if hides:
        legend.click_policy = "hide"
    legend.label_text_font_size = "11px"


def stacked(slots: list[Any], counts: dict[str, list[int]], ids: list[str]) -> dict[str, list[Any]]:
    """Bars stacked by reason as the rows of one glyph: a row for each slot and reason with a count,
    stacked in REASONS' order, then reasons a newer server gave. (One renderer per reason, twelve of
    them, made most of Live's first paint.) `ids` are the slots' batch ids for the tooltips."""
    data: dict[str, list[Any]] = {column: [] for column in STACK_COLUMNS}
    order = in_order(counts)
    for i, t in enumerate(slots):
        bottom = 0
        for reason in order:
            n = int(counts[reason][i])
            if n:
                row = (t, bottom, bottom + n, n, reason, REASON_COLORS.get(reason, NEW_REASON_COLOR), ids[i])
                for column, value in zip(STACK_COLUMNS, row):
                    data[column].append(value)
                bottom += n
    return data


def stacked_bars(plot: Any, source: Any, slot: timedelta, time_format: str, zone: str = "UTC") -> None:
    """Draw `stacked` rows on `plot`, each bar over its slot (t is the slot's start, written in `zone`),
    a legend item per reason present, tooltips with the batch ids."""
    ms = slot.total_seconds() * 1000
    plot.vbar(x=dodge("t", ms / 2, range=plot.x_range), bottom="bottom", top="top", width=ms * 0.9, color="color",
              legend_field="reason", source=source)
    outside(plot, hides=False)
    plot.add_tools(HoverTool(tooltips=[("at", f"@t{{{time_format}}} {zone}"), ("reason", "@reason"),
                                       ("batches", "@batches"), ("batch ids", "@ids")], formatters={"@t": "datetime"}))


def ids_by_slot(losses: Iterable[tuple[datetime, str | None]], start: datetime, width: timedelta, slots: int,
                per_slot: int = 5) -> list[str]:
    """The first few batch ids of each slot, for a bar's tooltip ("a, b, c, …")."""
    found: list[list[str]] = [[] for _ in range(slots)]
    more = [False] * slots
    for when, batch_id in losses:
        slot = int((when - start) / width)
        if 0 <= slot < slots:
            if len(found[slot]) < per_slot:
                found[slot].append(batch_id or "?")
            else:
                more[slot] = True
    return [", ".join(ids) + (", …" if extra else "") for ids, extra in zip(found, more)]


# Times as people read them, whatever the zoom: never "70ms ... 130ms" on a clock axis.
CLOCK_TICKS = dict(milliseconds="%H:%M:%S.%3N", seconds="%H:%M:%S", minsec="%H:%M:%S", minutes="%H:%M",
                   hourmin="%H:%M", hours="%H:%M", days="%b %d", months="%b %Y", years="%Y")


def clock_axis(plot: Any) -> None:
    """The plot's x axis in clock times (the plots' data are in UTC)."""
    plot.xaxis.formatter = DatetimeTickFormatter(**CLOCK_TICKS)  # type: ignore[arg-type]  # Bokeh's own keywords


# Column headers in words, the same on every page (a frame's columns keep their code names).
TITLES = {"batch_id": "batch", "acked_seq": "acked seq", "seq": "last seq", "gap_mode": "gap mode",
          "mean_seconds": "mean time between", "allow_atomic": "allow atomic", "allow_batched": "allow batched",
          "persist_mode": "persist mode", "required_api_level": "required API level", "at least": "at least",
          "leader_elections": "leader elections", "stream_updates": "stream updates",
          "other_abandonments": "other abandonments", "gaps_nearby": "gaps nearby", "min_flow": "min flow",
          "max_flow": "max flow", "first_lost_seq": "first lost seq", "err_code": "error code", "name": "stream"}
WRAPPED = "white-space: pre-wrap; overflow-wrap: anywhere;"  # a status line wraps inside the window, whatever it holds
HTML_COLUMNS = ("stream", "investigate", "name", "event", "result")  # cells the pages build as escaped HTML


def tabulator(value: Any, **options: Any) -> pn.widgets.Tabulator:
    """A read-only table as every page shows one: headers in words, stream names and links as HTML."""
    options.setdefault("disabled", True)
    options.setdefault("show_index", False)
    options.setdefault("sizing_mode", "stretch_width")
    options["titles"] = {**TITLES, **options.get("titles", {})}
    options["formatters"] = {**{c: {"type": "html"} for c in HTML_COLUMNS}, **options.get("formatters", {})}
    return pn.widgets.Tabulator(value, **options)
