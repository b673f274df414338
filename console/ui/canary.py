"""The Canary page: every node's last canary batches (atomic and fast), their times to the first ack and
to the commit, what they lost, and the commit times of the last hour drawn per node, so a slow node
stands out before a publisher meets it."""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any, TYPE_CHECKING

import pandas as pd
import panel as pn
import param
from bokeh.models import ColumnDataSource
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from console.commands import RunCanary
from console.domain.canary import CanaryResult, ms_text, node_health
from console.ui.controls import permitted, refusals
from console.ui.formatting import Clocked, coroutine, tabulator

if TYPE_CHECKING:
    from console.canary import CanaryRun

COLUMNS = ["node", "kind", "state", "first ack ms", "commit ms", "lost", "when", "error"]
NONE_YET = ("No canary result in the last hour. Start one: `batch-console canary` (or `up --canary`) sends an "
            "atomic and a fast batch through every node each minute, on streams of its own.")


class CanaryPage(Clocked, pn.viewable.Viewer):
    results = coroutine("async () -> [(when, CanaryResult)] of the last hour, oldest first")
    run_round = coroutine("async () -> CanaryRun: one round now, as the action canary.run (logged)", default=None)
    read_only = param.Boolean(default=False, doc="No control that changes the server is drawn")
    may = refusals()
    status = param.String(default="", doc="What the last round asked from the page did, or why it was refused")
    slow_ms = param.Number(default=1000.0, doc="A commit slower than this flags its node (BATCH_032's slow_ms)")
    rows = param.DataFrame(default=pd.DataFrame(columns=COLUMNS), doc="Each node and kind's last result")
    state = param.String(default="", doc="How many nodes, and which are failing or slow")

    refresh_every_ms = 10_000

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._table = tabulator(self.rows, widths={"error": 320})
        self._plot = figure(title="Canary commit time per node (ms), the last hour", x_axis_type="datetime", height=260,
                            sizing_mode="stretch_width", toolbar_location=None)
        self._source = ColumnDataSource({"t": [], "ms": [], "node": [], "color": []})
        self._plot.scatter("t", "ms", source=self._source, color="color", legend_field="node", size=6)
        controls: list[Any] = []
        if not self.read_only and self.run_round is not None:  # in read-only mode not even in the document
            self._run = pn.widgets.Button(label="Run a round now", button_type="primary", width=180)
            self._run.on_click(self._on_run)
            self.status = permitted([self._run], self.may(RunCanary))
            controls = [pn.Row(self._run, pn.pane.Markdown(self.param.status))]
        self._layout = pn.Column(pn.pane.Markdown("## Canary"), pn.pane.Markdown(self.param.state), *controls,
                                 self._table, pn.pane.Bokeh(self._plot, sizing_mode="stretch_width"),
                                 sizing_mode="stretch_width")

    async def run_now(self) -> CanaryRun | None:
        """One canary round through every node now (the button; a notebook calls it): the action canary.run,
        recorded and refused as any action; its results go to the event log and the table."""
        self.status = "Sending a canary batch of each kind through every node…"
        try:
            run: CanaryRun = await self.run_round()
        except Exception as e:  # refused (role, read-only), no event key, the server away: said here
            self.status = f"**Not run:** {html.escape(str(e)[:300] or type(e).__name__)}"
            return None
        failed = [r for r in run.results if r.failed]
        self.status = (f"{len(run.results)} canary batches through {len({r.node for r in run.results})} node(s): "
                       + (f"**{len(failed)} failed**" if failed else "every one committed, nothing lost"))
        await self.reload()
        return run

    async def _on_run(self, *_: Any) -> None:
        await self.run_now()

    async def reload(self) -> None:
        try:
            found = await self.results()
        except Exception as e:  # no event key yet, the server away: the page says so and reads again later
            self.state = f"The event log was not read: {str(e)[:300] or type(e).__name__}"
            return
        self._show(found)

    async def refresh(self) -> None:
        await self.reload()

    def _show(self, found: list[tuple[datetime, CanaryResult]]) -> None:
        if not found:
            self.state, self.rows = NONE_YET, pd.DataFrame(columns=COLUMNS)
            self._table.value = self.rows
            return
        last: dict[tuple[str, str], tuple[datetime, CanaryResult]] = {}
        for when, r in found:
            last[(r.node, r.kind)] = (when, r)
        sick = {h.node: h.finding(self.slow_ms) for h in node_health([r for _, r in last.values()])}
        rows = []
        for (node, kind), (when, r) in sorted(last.items()):
            slow = r.commit_ms is not None and r.commit_ms > self.slow_ms
            state = "stream changed by someone else" if r.tampered else "FAILED" if r.failed else "slow" if slow \
                else "led elsewhere" if r.led_elsewhere else "well"
            rows.append({"node": node if r.domain is None else f"{node} (domain {r.domain})", "kind": kind, "state": state,
                         "first ack ms": ms_text(r.first_ack_ms), "commit ms": ms_text(r.commit_ms), "lost": r.lost,
                         "when": self.clock.when(when), "error": r.tampered or r.error or ""})
        self.rows = pd.DataFrame(rows, columns=COLUMNS, dtype=object)
        self._table.value = self.rows
        bad = sorted(node for node, finding in sick.items() if finding is not None)
        changed = sorted({r.node for _, r in last.values() if r.tampered})
        self.state = (f"{len({n for n, _ in last})} node(s), the last round {self.clock.when(max(w for w, _ in found))}; "
                      + (f"**failing or slow: {', '.join(bad)}**" if bad else "every node well")
                      + (f"; **canary stream changed by someone else on {', '.join(changed)}** (BATCH_033): those "
                         "batches say nothing of the node" if changed else ""))
        drawn = [(when, r) for when, r in found if r.commit_ms is not None]
        colors = {node: Category10_10[i % 10] for i, node in enumerate(sorted({r.node for _, r in drawn}))}
        with pn.io.hold():  # sent to the browser as one change, wherever it is made (the page's first load too)
            self._source.data = {"t": [w for w, _ in drawn], "ms": [r.commit_ms for _, r in drawn],
                                 "node": [r.node[:40] for _, r in drawn], "color": [colors[r.node] for _, r in drawn]}

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
