"""The Audit page: who asked the console to change what, and when (every action, accepted or
refused), filtered by user, action, stream and days; the chain's state; a download in any export format."""

from __future__ import annotations

import html
import io
from datetime import date, datetime, time, timedelta, timezone
from typing import Any, cast

import pandas as pd
import panel as pn
import param

from console.commands import ExportTable
from console.domain.audit import Checked
from console.export import FORMATS
from console.queries.audit import ANY, COLUMNS, audit_frame
from console.ui.controls import download, exports, permitted, refusals
from console.ui.formatting import Clocked, coroutine, put, tabulator
from console.ui.history import stream_cell

def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """For the page's table: text escaped, a target's stream a link to its page."""
    out = frame.copy()
    for column in ("user", "address", "action", "outcome", "detail", "change", "agent"):
        out[column] = [html.escape(str(v)) for v in out[column]]
    out["target"] = [html.escape(str(v)) for v in out["target"]]
    if "system" in out:
        out["system"] = [html.escape(str(v)) for v in out["system"]]
    systems = list(out["system"]) if "system" in out else [None] * len(out)
    out["stream"] = [stream_cell(s, system=system) if s else "" for s, system in zip(out["stream"], systems)]
    return out


def chain_text(checked: Checked) -> str:
    unsafe = f"<br>**UNSAFE:** {html.escape(checked.unsafe)}" if checked.unsafe else ""
    if checked.intact:
        return (f"Chain intact: {checked.counted()}, each signed and following the one "
                f"before, none erased{html.escape(checked.aged())}.{unsafe}")
    shown = "; ".join(f"record {seq}: {html.escape(why)}" if seq else html.escape(why)
                      for seq, why in checked.breaks[:10])
    more = f" and {len(checked.breaks) - 10} more" if len(checked.breaks) > 10 else ""
    return f"**CHAIN BROKEN** ({len(checked.breaks)} break(s)): {shown}{more}{unsafe}"


def default_dates() -> tuple[Any, ...]:
    """The last seven days (UTC), today included: what the page shows first."""
    today = datetime.now(timezone.utc).date()
    return today - timedelta(days=6), today


def default_since() -> datetime:
    return _midnight(default_dates()[0])


def _midnight(day: Any) -> datetime:
    return datetime.combine(day, time(), timezone.utc)


class AuditPage(Clocked, pn.viewable.Viewer):
    trail = coroutine("async (since: datetime | None) -> Checked: the audit trail, read and checked")
    recent = param.Callable(default=lambda since: None,
                            doc="since -> (when, Checked) of the trail's last read in this process, or None")
    dates = param.CalendarDateRange(default=None, doc="The days shown, first and last included (UTC)")
    user: param.Selector[str] = param.Selector(default=ANY, objects=[ANY], check_on_set=False,
                                               doc="Only this user's records")
    action: param.Selector[str] = param.Selector(default=ANY, objects=[ANY], check_on_set=False,
                                                 doc="Only this action's records")
    stream = param.String(default="", doc="Only records that touched this stream")
    chain = param.String(default="", doc="Whether the chain holds, and where it breaks")
    export = exports("the audit trail")
    export_format: param.Selector[str] = param.Selector(default="csv", objects=list(FORMATS),
                                                        doc="The download's format")
    may = refusals()
    checked = param.ClassSelector(class_=Checked, default=Checked([], []), doc="The trail as read, with its breaks")
    records = param.DataFrame(default=pd.DataFrame(columns=COLUMNS), doc="The records as the filters show them")

    def __init__(self, **params: Any) -> None:
        params.setdefault("dates", default_dates())
        super().__init__(**params)
        w = pn.widgets
        html_cells = {c: {"type": "html"} for c in COLUMNS if c not in ("record", "time")}
        self._table = tabulator(self.records, height=420, formatters=html_cells, hidden_columns=["agent"],
                                widths={"detail": 320, "change": 240, "target": 200})
        self._download = w.FileDownload(callback=self.download, filename="audit.csv", label="Download CSV",
                                        button_type="light", width=160, align="end")
        cannot = permitted([self._download], self.may(ExportTable))
        self._layout = pn.Column(
            pn.pane.Markdown("## Audit"), pn.pane.Markdown(self.param.chain),
            pn.pane.Markdown(cannot, visible=bool(cannot)),
            pn.Row(w.DateRangePicker.from_param(self.param.dates, name="dates (UTC)", width=250),
                   w.Select.from_param(self.param.user, name="user", width=180),
                   w.Select.from_param(self.param.action, name="action", width=200),
                   w.TextInput.from_param(self.param.stream, name="stream", width=200),
                   w.Select.from_param(self.param.export_format, name="format", width=100), self._download),
            self._table, sizing_mode="stretch_width")

    def recall(self) -> None:
        """The trail as this process last read it, its time said, for the first answer; reload reads it again."""
        found = self.recent(self._since())
        if found is None:
            self.chain = "Reading the audit trail…"
            return
        at, checked = found
        self._show(checked, f" <small>(as read at {self.clock.when(at)}; reading it again…)</small>")

    async def reload(self) -> None:
        try:
            checked = await self.trail(self._since())
        except Exception as e:  # no event key yet, the server did not answer: said where the chain's state goes
            self.chain = f"**The audit trail was not read:** {html.escape(str(e) or type(e).__name__)}"
            return
        self._show(checked)

    def _since(self) -> datetime:
        return _midnight(cast(tuple[date, date], self.dates)[0])

    def _show(self, checked: Checked, note: str = "") -> None:
        self.checked = checked
        self.chain = chain_text(checked) + note
        self.param.user.objects = [ANY, *sorted({r.actor.user for _, r in self.checked.records})]
        self.param.action.objects = [ANY, *sorted({r.action for _, r in self.checked.records})]
        self._filter()

    @param.depends("user", "action", "stream", watch=True)
    def _filter(self) -> None:
        _, last = cast(tuple[date, date], self.dates)
        until = _midnight(last + timedelta(days=1))
        self.records = audit_frame(self.checked, self.clock, self.user, self.action, self.stream.strip(), until)
        put(self._table, shown(self.records))

    @param.depends("dates", watch=True)
    async def _on_dates(self) -> None:
        await self.reload()

    def frame(self) -> pd.DataFrame:
        """The records as the filters show them."""
        return self.records

    def export_command(self) -> ExportTable:
        """The records shown, in the chosen format (the action export.csv)."""
        first, last = (f"{d:%Y-%m-%d}" for d in cast(tuple[date, date], self.dates))
        frame = self.frame()
        return ExportTable("audit", f"{first}..{last}", self.export_format, frame.to_dict("records"),
                           list(frame.columns), {"table": "audit", "from": first, "to": last})

    async def download(self) -> io.BytesIO:
        return await download(self.export, self.export_command())

    @param.depends("export_format", watch=True)
    def _on_format(self) -> None:
        self._download.filename = f"audit.{self.export_format}"
        self._download.label = f"Download {FORMATS[self.export_format].label}"

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout

