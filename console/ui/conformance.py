"""The Conformance page: which batch publishers follow ADR-50, judged on the wire by the collector.
A matrix of clients by statement (pass, FAIL, not observed, cannot tell without the publish side), and
each failure with the ADR's words, what was seen, and its batches linked to their Incident. The same
verdicts as `batch-console conformance` and the check BATCH_030."""

from __future__ import annotations

import html
from urllib.parse import quote
from typing import Any

import pandas as pd
import panel as pn
import param

from console.conformance import MARK
from console.domain.conformance import FAIL, UNCONFIRMED, ClientVerdict, Verdicts
from console.domain.statements import STATEMENTS
from console.ui.formatting import Clocked, coroutine, put, tabulator
from console.ui.history import incident_link, stream_cell

# "failing" names what fails beside the verdict: at 1280 px most statement columns are out of view, and a
# row of visible "pass" cells beside "does not conform" read as a contradiction
MATRIX = ["client", "verdict", "failing", "batches", *STATEMENTS]
FAILURES = ["client", "statement", "seen", "stream", "batch", "when", "ADR-50"]  # the ADR's words last: the longest


class ConformancePage(Clocked, pn.viewable.Viewer):
    verdicts = coroutine("async () -> Verdicts: the clients' latest verdicts from the event log")
    recent = param.Callable(default=lambda: None, doc="() -> the verdicts as last read in this process, or None")
    client = param.String(default="", doc="Only clients whose name, library or account contains this")
    failing_only = param.Boolean(default=False, doc="Only clients that fail a statement")
    matrix = param.DataFrame(default=pd.DataFrame(columns=MATRIX), doc="Clients by statement")
    failures = param.DataFrame(default=pd.DataFrame(columns=FAILURES), doc="Every failure with its batches")
    state = param.String(default="", doc="How many clients, how many do not conform")

    refresh_every_ms = 10_000  # the collector writes changed verdicts every status_every seconds

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        marks = {sid: {"type": "html"} for sid in STATEMENTS}
        # as tall as its rows, ten clients a page: a height set with each change (Tabulator drew its rows into the
        # old height on a loaded machine, and none of them in view) could show a verdict with no client row
        self._matrix = tabulator(self.matrix, pagination="local", page_size=10, formatters={"client": {"type": "textarea"}, **marks},
                                 widths={"client": 240, "verdict": 130, "failing": 150, "batches": 90,
                                         **{sid: 60 for sid in STATEMENTS}},
                                 frozen_columns=["client", "verdict", "failing"], header_align="center")
        self._failures = tabulator(self.failures, height=360, formatters={
            **{c: {"type": "textarea"} for c in ("client", "statement", "ADR-50", "seen")},
            "batch": {"type": "html"}, "stream": {"type": "html"}},
            widths={"client": 200, "statement": 180, "ADR-50": 320, "seen": 200})  # all but the ADR's words in view
        legend = " · ".join(f"**{sid}** {html.escape(s.title)}" for sid, s in STATEMENTS.items())
        w = pn.widgets
        self._layout = pn.Column(
            pn.pane.Markdown("## Conformance of batch publishers to ADR-50"), pn.pane.Markdown(self.param.state),
            pn.Row(w.TextInput.from_param(self.param.client, name="client", width=260),
                   w.Checkbox.from_param(self.param.failing_only, name="only clients that fail")),
            pn.pane.Markdown("Client, verdict and failing stay in view; the statements' columns scroll sideways "
                             "(each id is explained below the tables)."),
            self._matrix, pn.pane.Markdown("### Failures"), self._failures,
            pn.pane.Markdown(f"<small>{legend}. pass / FAIL / fail? unconfirmed: only replies on the client's inbox "
                             "say so, and any client of the account can publish there / - not observed / ? cannot "
                             "tell without the publish side (`--tap-publish-side`).</small>"),
            sizing_mode="stretch_width")
        self._known: list[ClientVerdict] = []

    def recall(self) -> None:
        """The verdicts as this process last read them, for the first answer; reload reads them again."""
        found = self.recent()
        if found is None:
            self.state = "Reading the verdicts from the event log…"
            return
        self._known = found.report()
        self._show()

    async def reload(self) -> None:
        try:
            found: Verdicts = await self.verdicts()
        except Exception as e:  # no event key, no log: said, never a blank page
            self.state = f"The verdicts could not be read: {html.escape(str(e)[:200])}"
            return
        self._known = found.report()
        self._show()

    async def refresh(self) -> None:
        await self.reload()

    @param.depends("client", "failing_only", watch=True)
    def _show(self) -> None:
        wanted = [v for v in self._known if (not self.failing_only or v.failing)
                  and self.client.strip().lower() in (v.name + " " + v.key).lower()]
        failing = sum(1 for v in self._known if v.failing)
        self.state = (f"**{len(self._known)}** client(s) graded, **{failing}** do not conform"
                      if self._known else "No verdicts yet: the collector grades every batch publisher it sees "
                      "(the tap; the publish side with --tap-publish-side) and writes each client's verdict to the "
                      "event log as its batches end.")
        self.matrix = pd.DataFrame([_matrix_row(v) for v in wanted], columns=MATRIX, dtype=object)
        rows = [row for v in wanted for row in _failure_rows(v, self.clock.when)]
        self.failures = pd.DataFrame(rows, columns=FAILURES, dtype=object)
        put(self._matrix, self.matrix)
        put(self._failures, self.failures)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


def conformance_line(v: ClientVerdict) -> str:
    """The publisher's verdict in a sentence of HTML, linked to its row of the report."""
    link = f'<a href="/conformance?client={quote(v.key, safe="")}">conformance report</a>'
    if not v.failing:
        said = v.verdict()
        said = "conforms to ADR-50" if said == "conforms" else f"shows no ADR-50 failure ({said.split('; ')[-1]})"
        return f"its client {said} over {v.batches} graded batch(es) ({link})"
    failing = ", ".join(f"{sid} {html.escape(STATEMENTS[sid].title)}" for sid in v.failing)
    return f'its client <b style="color:#c92a2a">does not conform to ADR-50</b>: {failing} ({link})'


COLOURS = {"pass": "#2b8a3e", "FAIL": "#c92a2a", "fail?": "#e67700"}


def _mark(status: str) -> str:
    mark = MARK[status]
    colour = COLOURS.get(mark)
    return f'<b style="color:{colour}" title="{html.escape(status)}">{mark}</b>' if colour else \
        f'<span title="{html.escape(status)}">{mark}</span>'


def _matrix_row(v: ClientVerdict) -> dict[str, Any]:
    verdict = v.verdict()
    failing = ", ".join([*v.failing, *(f"{sid}?" for sid in v.unconfirmed)])
    return {"client": v.name, "verdict": verdict, "failing": failing, "batches": v.batches,
            **{sid: _mark(v.status(sid)) for sid in STATEMENTS}}


def _failure_rows(v: ClientVerdict, when: Any) -> list[dict[str, Any]]:
    from datetime import datetime

    rows = []
    for sid in STATEMENTS:
        if v.status(sid) not in (FAIL, UNCONFIRMED):
            continue
        s = STATEMENTS[sid]
        for e in v.results[sid].examples:
            # what was seen and where to look first; the ADR's own words, the longest, last
            rows.append({"client": v.name, "statement": f"{sid} {s.title}",
                         "seen": e.detail + (" (unconfirmed: rests on replies alone)"
                                             if v.status(sid) == UNCONFIRMED else ""), "batch": incident_link(e.batch_id) and
                         f'{incident_link(e.batch_id)} <code>{html.escape(e.batch_id[:24])}</code>',
                         "stream": stream_cell(e.stream) if e.stream else "",
                         "when": when(datetime.fromisoformat(e.time.replace("Z", "+00:00"))),
                         "ADR-50": f"{s.section}: {s.adr}"})
    return rows
