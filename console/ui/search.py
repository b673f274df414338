"""The Search page: any stream, a subject filter and a window the server applies, a CEL predicate over
headers and payload, hard limits; progress every second (scanned, matched, bytes, elapsed, the
sequence reached), Cancel, and each match linked to Replay (its sequence) and, in a batch, to the batch
replayed. The whole query is in the URL. A search is the action search.run, audited with its query."""

from __future__ import annotations

import asyncio
import html
import io
from datetime import datetime
from urllib.parse import urlencode
from typing import Any

import pandas as pd
import panel as pn
import param

from console.domain.display import as_utc
from console.domain.messages import preview
from console.domain.search import (LIMITS, NEWEST, OLDEST, Found, SearchProgress, SearchQuery, SearchRefused,
                                   search_time)
from console.commands import ExportSearch, RunSearch
from console.export import FORMATS
from console.ui.controls import download, exports, permitted, refusals
from console.ui.formatting import Clocked, coroutine, put, tabulator

COLUMNS = ["sequence", "subject", "time", "batch", "headers", "payload"]
SHOWN = 10_000  # matches a page holds at most (an export from the command line takes any number)


def _time(text: str) -> datetime | None:
    moment = search_time(text)
    return as_utc(moment) if moment is not None else None  # the page's times are UTC


class SearchPage(Clocked, pn.viewable.Viewer):
    run = coroutine("async (query, progress, cancelled) -> (matches, SearchProgress): the action search.run")
    stream = param.String(default="", doc="The stream searched")
    subject = param.String(default="", doc="A subject filter, applied by the server")
    # No bounds here: a value from the URL out of range is refused by the query, beside the form
    start_seq = param.Integer(default=0, doc="The first sequence (0: the stream's first)")
    end_seq = param.Integer(default=0, doc="The last sequence (0: the stream's last)")
    since = param.String(default="", doc="From this time (ISO 8601)")
    until = param.String(default="", doc="To this time (ISO 8601)")
    where = param.String(default="", doc='A CEL expression: payload.amount > 100 && headers["kind"] == "refund"')
    newest_first = param.Boolean(default=False, doc="Read from the end backwards")
    max_scanned = param.Integer(default=int(LIMITS["max_scanned"][2]), doc="Messages read at most")
    max_matches = param.Integer(default=int(LIMITS["max_matches"][2]), doc="Matches at most")
    max_seconds = param.Number(default=LIMITS["max_seconds"][2], doc="Seconds at most")
    state = param.String(default="", doc="Where the search stands, or why it was refused")
    running = param.Boolean(default=False, doc="A search is under way")
    results = param.DataFrame(default=pd.DataFrame(columns=COLUMNS), doc="The matches shown")
    export_format: param.Selector[str] = param.Selector(default="csv", objects=list(FORMATS),
                                                        doc="The matches' download format")
    export = exports("the matches (export.search)")
    may = refusals()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._cancel = False
        self._task: asyncio.Task[Any] | None = None
        w = pn.widgets
        self._go = w.Button(name="Search", button_type="primary", width=110)
        self._stop = w.Button(name="Cancel", width=90, disabled=True)
        self._go.on_click(lambda *_: self.start())
        self._stop.on_click(lambda *_: self.cancel())
        self._found: list[Found] = []
        self._query: SearchQuery | None = None
        self._download = w.FileDownload(callback=self.download, filename="matches.csv", label="Download matches",
                                        button_type="light", disabled=True)
        self._cannot = pn.pane.Markdown(permitted([self._go], self.may(RunSearch)))
        self._table = tabulator(self.results, height=520, formatters={
            "sequence": {"type": "html"}, "batch": {"type": "html"}, "headers": {"type": "textarea"},
            "payload": {"type": "html"}}, widths={"subject": 160, "time": 200, "headers": 220, "payload": 420})
        self._layout = pn.Column(
            pn.pane.Markdown("## Search"),
            pn.Row(w.TextInput.from_param(self.param.stream, name="stream", width=180),
                   w.TextInput.from_param(self.param.subject, name="subject filter", width=200),
                   w.IntInput.from_param(self.param.start_seq, name="from seq", width=110),
                   w.IntInput.from_param(self.param.end_seq, name="to seq", width=110),
                   w.TextInput.from_param(self.param.since, name="since", width=190),
                   w.TextInput.from_param(self.param.until, name="until", width=190)),
            w.TextAreaInput.from_param(self.param.where, name="where (CEL: subject, seq, time, headers, size, text, "
                                                               "payload)", height=70, sizing_mode="stretch_width"),
            pn.Row(w.Checkbox.from_param(self.param.newest_first, name="newest first"),
                   w.IntInput.from_param(self.param.max_scanned, name="max scanned", width=130),
                   w.IntInput.from_param(self.param.max_matches, name="max matches", width=120),
                   w.FloatInput.from_param(self.param.max_seconds, name="max seconds", width=110),
                   self._go, self._stop, w.Select.from_param(self.param.export_format, name="format", width=90),
                   self._download),
            pn.pane.Markdown(self.param.state), self._cannot, self._table, sizing_mode="stretch_width")

    def query(self) -> SearchQuery:
        return SearchQuery(self.stream.strip(), subject=self.subject.strip(), start_seq=self.start_seq or None,
                           end_seq=self.end_seq or None, since=_time(self.since), until=_time(self.until),
                           where=self.where, direction=NEWEST if self.newest_first else OLDEST,
                           max_scanned=self.max_scanned, max_matches=min(self.max_matches, SHOWN),
                           max_seconds=float(self.max_seconds))

    async def reload(self) -> None:
        """A URL that names a stream runs its search at once (a link from elsewhere, a shared query)."""
        if self.stream.strip():
            await self.search()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.ensure_future(self.search())

    def cancel(self) -> None:
        self._cancel = True

    def close(self) -> None:
        """The page is gone (its tab closed, its session ended): its search stops, its consumer goes."""
        self._cancel = True

    async def search(self) -> list[Found]:
        if self.running:
            self.state = "**Refused**: a search of this page is running: Cancel it first"
            return []
        try:
            query = self.query()
        except SearchRefused as e:
            self.state = f"**Refused**: {html.escape(e.reason)}"
            return []
        self._cancel, self.running = False, True
        self._go.disabled, self._stop.disabled = True, False
        self.state = "searching…"
        try:
            found: list[Found]
            found, state = await self.run(query, self._progress, lambda: self._cancel)
        except Exception as e:  # the server's refusal, a missing stream: said beside the form
            self.state = f"**The search failed**: {html.escape(str(e)[:300])}"
            return []
        finally:
            self.running = False
            self._go.disabled, self._stop.disabled = False, True
        self._progress(state)
        self._found, self._query = found, query
        self._download.disabled = not found
        if found:
            self._cannot.object = permitted([self._download], self.may(ExportSearch, query.stream))
        self._on_format()
        self.results = pd.DataFrame([_row(query.stream, f, self.clock.when) for f in found], columns=COLUMNS,
                                    dtype=object)
        put(self._table, self.results)
        return found

    @param.depends("export_format", watch=True)
    def _on_format(self) -> None:
        self._download.filename = f"{self.stream.strip() or 'matches'}-matches.{self.export_format}"

    async def download(self) -> io.BytesIO:
        """The matches the page holds (masked as shown), with the query that found them."""
        if self._query is None:
            return io.BytesIO()
        return await download(self.export, ExportSearch(self._query, self.export_format, matches=list(self._found)))

    def _progress(self, state: SearchProgress) -> None:
        self.state = html.escape(state.line())

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


def _row(stream: str, f: Found, when: Any) -> dict[str, Any]:
    e = html.escape
    replay = "/replay?" + urlencode({"stream": stream, "start_seq": f.seq})
    # A stored message of an atomic batch is a committed batch's (an abandoned one stores nothing): its link
    # is the batch replayed, not an Incident, which has nothing for it
    batch = (f'<a href="{e("/replay?" + urlencode({"stream": stream, "batch_id": f.batch_id}))}">'
             f'{e(f.batch_id[:24])}</a>') if f.batch_id else ""
    shown = preview(f.data)
    return {"sequence": f'<a href="{e(replay)}">{f.seq}</a>', "subject": f.subject, "time": when(f.time, fraction=True),
            "batch": batch, "headers": "\n".join(f"{k}: {v}" for k, v in f.headers),
            "payload": f'<pre style="white-space:pre-wrap;overflow-wrap:anywhere;margin:0">{shown.text}</pre>'}
