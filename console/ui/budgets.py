"""The Budgets page: each loss objective's budget over its window, what is left of it, how fast it burns
over the SRE workbook's windows, and the losses that spent it (each linked to its incident)."""

from __future__ import annotations

import html
from typing import Any, cast

import pandas as pd
import panel as pn
import param
from bokeh.models import ColumnDataSource, FactorRange, Range1d
from bokeh.plotting import figure

from console.domain.budgets import BudgetStatus, allowed_text, state_of
from console.ui.formatting import Clocked, tabulator
from console.ui.history import incident_link, stream_cell

COLUMNS = ["objective", "measure", "state", "spent", "lost", "of", "allowed", "burn 1h", "burn 6h", "burn 1d",
           "burn 3d"]
LOSS_COLUMNS = ["time", "stream", "batch", "what", "publisher", "incident"]
EXAMPLE = """No loss objectives: give the console a file of them (`--objectives FILE`, or
`BATCH_CONSOLE_OBJECTIVES`) and the analytics job counts each one's budget:

```toml
[[objective]]
name = "orders"
streams = ["ORDERS*"]
lost_messages_per_million = 10
lost_batches_per_thousand = 1
window = "28d"
```"""


def _burn(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def status_frame(statuses: list[BudgetStatus]) -> pd.DataFrame:
    rows = [{"objective": s.objective, "measure": s.measure, "state": state_of(s),
             "spent": "" if s.spent is None else f"{s.spent:.1%}", "lost": f"{s.counts.lost:,}",
             "of": f"{s.counts.total:,}", "allowed": allowed_text(s),
             **{f"burn {w}": _burn(s.burns.get(w)) for w in ("1h", "6h", "1d", "3d")}} for s in statuses]
    return pd.DataFrame(rows, columns=COLUMNS, dtype=object)


class BudgetsPage(Clocked, pn.viewable.Viewer):
    statuses = param.Callable(doc="() -> list[BudgetStatus], or None: no objectives or no analytics tables")
    losses = param.Callable(default=lambda objective: [],
                            doc="objective name -> the losses that spent its budget (dicts), newest first")
    problem = param.Callable(default=lambda: None,
                             doc="() -> why the objectives file as edited is not read (its objectives before kept), or None")
    objective = param.String(default="", doc="The objective whose losses are listed")
    rows = param.DataFrame(default=pd.DataFrame(columns=COLUMNS), doc="Each objective's measures, as shown")
    state = param.String(default="", doc="When the budgets were summed, and what is spent or burning")

    refresh_every_ms = 15_000  # the counts move with each run of the analytics job

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._statuses: list[BudgetStatus] = []
        self._table = tabulator(self.rows, selectable=1, widths={"state": 300})
        self._table.on_click(self._on_click)
        self._source = ColumnDataSource({"label": [], "spent": [], "color": []})
        self._plot = figure(title="Budget spent over each objective's window (the line: all of it)", height=220,
                            y_range=FactorRange(factors=[]), x_range=Range1d(start=0, end=1.1),
                            x_axis_label="share of the budget spent",
                            toolbar_location=None, sizing_mode="stretch_width")
        self._plot.hbar(y="label", right="spent", height=0.6, color="color", source=self._source)
        self._plot.vspan(x=[1.0], line_color="#c92a2a", line_dash="dashed", line_width=2)
        self._losses = tabulator(pd.DataFrame(columns=LOSS_COLUMNS), height=300, disabled=True,
                                 formatters={"stream": {"type": "html"}, "batch": {"type": "html"},
                                             "incident": {"type": "html"}})
        self._losses_title = pn.pane.Markdown("")
        self._drawn = pn.Column(pn.pane.Bokeh(self._plot, sizing_mode="stretch_width"), visible=False,
                                sizing_mode="stretch_width")  # an empty frame said nothing: shown once it has a bar
        self._problem = pn.pane.Str("", visible=False, sizing_mode="stretch_width", css_classes=["bc-problem"])
        self._layout = pn.Column(pn.pane.Markdown("## Loss budgets"), self._problem, pn.pane.Markdown(self.param.state),
                                 self._table, self._drawn,
                                 self._losses_title, self._losses, sizing_mode="stretch_width")

    def read(self) -> None:
        found = self.statuses()  # reads the objectives file again if it changed: its problem after
        problem = self.problem()
        self._problem.object = "" if problem is None else (
            f"The objectives file as it is now is not read: the objectives read before the change, if any, are kept "
            f"until it is mended.\n{problem}")
        self._problem.visible = problem is not None
        if found is None:
            self.state = EXAMPLE
            self._statuses = []
        else:
            self._statuses = found
            bad = [s for s in found if state_of(s) != "within"]
            when = self.clock.when(found[0].as_of) if found else "now"
            self.state = (f"{len(found)} measure(s) of {len({s.objective for s in found})} objective(s), as of {when}; "
                          + (f"**{len(bad)} spent, burning or not known**" if bad else "every one within its budget"))
        self.rows = status_frame(self._statuses)
        self._table.value = self.rows
        spent = [s for s in self._statuses if s.spent is not None]
        labels = [f"{s.objective} · {s.measure}" for s in spent]
        with pn.io.hold():  # one change for the browser, on the page's first load too (an async one)
            self._drawn.visible = bool(spent)  # drawn once a measure has a budget spent to draw
            cast(FactorRange, self._plot.y_range).factors = labels
            cast(Range1d, self._plot.x_range).end = max([1.1] + [1.05 * (s.spent or 0) for s in spent])
            self._source.data = {"label": labels, "spent": [s.spent for s in spent],
                                 "color": ["#c92a2a" if (s.spent or 0) >= 1 else "#e67700" if s.burning else "#2b8a3e"
                                           for s in spent]}
        self._show_losses()

    def refresh(self) -> None:
        self.read()

    async def reload(self) -> None:
        self.read()

    def _on_click(self, event: Any) -> None:
        if 0 <= event.row < len(self.rows):
            self.objective = str(self.rows.iloc[event.row]["objective"])

    @param.depends("objective", watch=True)
    def _show_losses(self) -> None:
        name = self.objective or (self._statuses[0].objective if self._statuses else "")
        if not name:
            self._losses_title.object, self._losses.value = "", pd.DataFrame(columns=LOSS_COLUMNS)
            return
        found = self.losses(name)
        e = html.escape
        self._losses_title.object = (f"### What spent the budget of {e(name)}\n{len(found)} loss(es) in its window, "
                                     "newest first (click an objective above for its own)")
        self._losses.value = pd.DataFrame([{
            "time": self.clock.when(r["time"]), "stream": stream_cell(r["stream"]),
            "batch": e(r["batch_id"] or ""), "what": r["what"], "publisher": r["publisher"],
            "incident": incident_link(r["batch_id"])} for r in found], columns=LOSS_COLUMNS, dtype=object)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


