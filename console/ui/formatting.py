"""What tables show: times as the session's clock writes them (never a raw epoch), seconds as
durations; and what the plots share (legends beside them, hover tooltips with batch ids)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

import pandas as pd
import param
from bokeh.models import HoverTool

from console.domain.display import Clock, duration


class Clocked(param.Parameterized):
    """A page that writes times: in UTC, or in the reader's zone (the frame's switch sets it)."""

    clock = param.ClassSelector(class_=Clock, default=Clock(), doc="How times are written", precedence=-1)


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


def put(table, frame: pd.DataFrame) -> None:
    """Give a table a new frame only when it differs: a redraw on a timer sends nothing, and keeps the
    reader's scroll and selection, while nothing changed."""
    old = table.value
    if not (isinstance(old, pd.DataFrame) and list(old.columns) == list(frame.columns) and old.equals(frame)):
        table.value = frame


def outside(plot) -> None:
    """The legend beside the plot area, never over the data."""
    legend = plot.legend[0]
    plot.add_layout(legend, "right")
    legend.click_policy = "hide"
    legend.label_text_font_size = "11px"


def bar_hover(time_format: str) -> HoverTool:
    """For stacked bars of one column per reason, with the slot's batch ids in "ids"."""
    return HoverTool(tooltips=[("at", f"@t{{{time_format}}} UTC"), ("reason", "$name"), ("batches", "@$name"),
                               ("batch ids", "@ids")], formatters={"@t": "datetime"})


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
