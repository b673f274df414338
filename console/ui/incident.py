"""The Incident page: one lost batch, what the tap saw of it, the minutes around it, and a report."""

from __future__ import annotations

import html
import io
import re
from typing import Any, Awaitable, Callable

import pandas as pd
import panel as pn
import param

from console.domain.conformance import ClientVerdict
from console.domain.display import Clock
from console.domain.events import ATOMIC_KINDS, EventKind
from console.domain.incident import (
    Incident, describe, folded_lines, incident_report, manifest_lines, no_messages_why, timeline_rows,
)
from console.domain.kept_messages import ShownMessage
from console.ui.conformance import conformance_line
from console.commands import ExportReport, RepublishKept
from console.ui.controls import download, exports, failed, permitted, refusals, taken
from console.payloads import Payloads
from console.ui.formatting import Clocked, coroutine, shows_payloads, tabulator
from console.ui.history import stream_cell

Finder = Callable[[str], Awaitable[Incident | None]]


def timeline_frame(incident: Incident, clock: Clock = Clock()) -> pd.DataFrame:
    """Oldest first, times to the millisecond in the clock's zone; the batch's own rows in bold on yellow."""
    rows, own = [], []
    for t, s, what, mine in timeline_rows(incident):
        rows.append({"time": clock.when(t, fraction=True), "stream": stream_cell(s), "event": html.escape(what)})
        own.append(mine)
    frame = pd.DataFrame(rows, columns=["time", "stream", "event"], dtype=object)
    frame["event"] = [f'<b style="background:#fff3bf;color:#1d2330">{e}</b>' if mine else e
                      for e, mine in zip(frame["event"], own)]
    return frame


def messages_html(messages: list[ShownMessage], incident: Incident) -> str:
    """The batch's kept first and last messages, every part escaped; why there are none, else."""
    e = html.escape
    title = "<b>The batch's first and last messages</b> (as the publish side saw them, masked by the rules)"
    if not messages:
        return f'<p>{title}<br><span style="color:#666">{e(no_messages_why(incident))}</span></p>'
    parts = []
    for m in messages:
        rows = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in m.headers)
        note = f'<div style="color:#b00" role="note">{e(m.problem)}</div>' if m.problem else ""
        parts.append(f'<div class="bc-kept" style="margin:.3rem 0 .8rem"><b>{e(m.place)}</b> · batch sequence {m.seq} · {e(m.subject)} · '
                     f'<span style="color:#666">{e(m.about)}</span>{note}'
                     + (f"<table>{rows}</table>" if rows else "")
                     + f'<pre style="white-space:pre-wrap;overflow-wrap:anywhere;max-height:16em;overflow:auto">{e(m.text)}</pre></div>')
    return f"<p>{title}</p>" + "".join(parts)


def report_filename(batch_id: str) -> str:
    return "incident-" + (re.sub(r"[^A-Za-z0-9_.-]", "_", batch_id)[:64] or "batch") + ".md"


class IncidentPage(Clocked, pn.viewable.Viewer):
    find = coroutine("async batch_id -> Incident | None (event log, live model, history)")
    replay_link = param.Callable(default=lambda incident: None, doc="Incident -> link into Replay, or None")
    advice = param.Callable(default=lambda incident: None, doc="Incident -> what to do about it, or None")
    console_url = param.String(default="", doc="The console's URL: the report's links are absolute with it")
    batch_id = param.String(default="", doc="The batch shown")
    export = exports("the incident's report")
    run = coroutine("async (command) -> its result: the action, checked, recorded", default=None)
    may = refusals()
    read_only = param.Boolean(default=False, doc="No control that changes the server is drawn")
    peek = param.Callable(default=lambda batch_id: None,
                          doc="batch_id -> the live model's LostBatch, or None: what shows before the event log is read")

    payloads = param.ClassSelector(class_=Payloads, default=None, precedence=-1,
                                   doc="The payload pipeline for this page's user (required): the kept messages")
    verdicts = coroutine("async () -> Verdicts: the publishers' conformance verdicts", default=None)
    verdict = param.ClassSelector(class_=ClientVerdict, default=None, doc="The publisher's conformance verdict")
    incident = param.ClassSelector(class_=Incident, default=None, doc="What was found of the batch, or None")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._payloads = shows_payloads(self)  # the user's, fixed when the page is made
        self._search = pn.widgets.TextInput(label="batch id", value=self.batch_id)
        self._go = pn.widgets.Button(label="Investigate", button_type="primary")
        self._summary = pn.pane.HTML(self._first_look())
        self._timeline = tabulator(pd.DataFrame(columns=["time", "stream", "event"]), disabled=True,
                                              show_index=False, sizing_mode="stretch_width", height=360,
                                              formatters={"stream": {"type": "html"}, "event": {"type": "html"}})
        self._download = pn.widgets.FileDownload(callback=self.report, filename="incident.md",
                                                 label="Download report (Markdown)", button_type="light",
                                                 visible=False)
        self._go.on_click(self._on_go)
        self._cannot = pn.pane.Markdown("")
        # the kept messages as a new atomic batch, where they are the whole batch (RepublishKept says when not)
        self._republish = pn.widgets.Button(label="Republish kept messages", visible=False)
        self._republish.on_click(self._on_republish)
        self._republished = pn.pane.Markdown("")
        acting = [pn.Row(self._republish, self._republished)] if not self.read_only else []  # not in its document
        self._layout = pn.Column(pn.pane.Markdown("## Incident"), pn.Row(self._search, self._go), self._summary,
                                 self._download, self._cannot, *acting,
                                 pn.pane.Markdown("### Timeline"), self._timeline, sizing_mode="stretch_width")

    def _first_look(self) -> str:
        """The batch as Live holds it, while the event log is read for the rest."""
        lost = self.peek(self.batch_id) if self.batch_id else None
        if lost is None:
            return ""
        e = html.escape
        return (f"<p><b>{e(lost.batch_id or '')}</b>: {e(lost.kind)} batch lost, reason {e(lost.reason)}<br>"
                f"stream <b>{stream_cell(lost.stream, lost.probable_stream)}</b> · {self.clock.when(lost.time)}"
                + (f"<br>published by <b>{e(lost.publisher)}</b>" if lost.publisher else "")
                + "<br><i>Reading the event log for its timeline…</i></p>")

    async def _on_go(self, *_: Any) -> None:
        self.batch_id = (self._search.value or "").strip()
        await self.reload()

    async def reload(self) -> None:
        if not self.batch_id:
            self._summary.object = "Give a batch id, or open one from Live or History."
            return
        self._summary.object = self._first_look() or "Reading the event log…"
        self.incident = incident = await self.find(self.batch_id)
        self.verdict = await self._verdict(incident)
        if incident is None:
            self._summary.object = (f"No lost batch <b>{html.escape(self.batch_id)}</b> in the live hour or in the "
                                    "history tables.")
            self._download.visible = False
            return
        e = html.escape
        loss = incident.loss
        link = self.replay_link(incident)
        replay = f'<a href="{e(link)}">the stream\'s messages in this window (Replay)</a>' if link else \
            "the stream is not known, so there is no Replay link"
        tap = ("<br>".join(e(describe(t)) for t in incident.seen_by_tap) or
               ("nothing: atomic batches have no $FI traffic" if loss.kind is EventKind.ATOMIC_ABANDONED else "nothing"))
        self._summary.object = (
            f"<p><b>{e(describe(loss))}</b><br>stream <b>{stream_cell(loss.stream, loss.probable_stream)}</b> · "
            f"{self.clock.when(loss.time, fraction=True)} · event {e(loss.event_id)}"
            + (f" · account {e(loss.account)}" if loss.account else "")
            + (f"<br>published by <b>{e(incident.publisher.line())}</b>" if incident.publisher else "")
            + (f"<br>{conformance_line(self.verdict)}" if self.verdict else "")
            + f"<br>{replay}</p>"
            + (f"<p><b>What to do</b><br>{e(todo)}</p>" if (todo := self.advice(incident)) else "")
            + (f"<p><b>What is missing</b> (manifest {e(incident.manifest.id)})<br>"
               + "<br>".join(e(line) for line in manifest_lines(incident.manifest)) + "</p>" if incident.manifest else "")
            + f"<p><b>What the tap saw</b><br>{tap}</p>"
            + messages_html(self._payloads.kept(incident), incident)
            + f"<p>{len(incident.context)} event(s) of this stream, leader elections and blind windows within "
            f"{incident.around.total_seconds() / 60:g} min"
            + (f"; not listed: {e('; '.join(folded_lines(incident)))}" if incident.folded else "") + "</p>")
        self._timeline.value = timeline_frame(incident, self.clock)
        self._download.filename = report_filename(self.batch_id)
        self._download.visible = True
        self._cannot.object = permitted([self._download], self.may(ExportReport, loss.stream or None))
        # an atomic batch's kept messages (RepublishKept says why when none were kept, or not the whole batch)
        self._republish.visible = (loss.kind in ATOMIC_KINDS and loss.stream is not None and self.run is not None
                                   and not self.read_only)
        self._republished.object = permitted([self._republish], self.may(RepublishKept, loss.stream or None)) \
            if self._republish.visible else ""

    async def republish(self) -> object:
        """The lost batch's kept messages as a new atomic batch (a button; a notebook calls it): the PubAck, or
        None (the page says why)."""
        incident = self.incident
        if incident is None or incident.loss.stream is None or self.run is None:
            return None
        stream, batch = incident.loss.stream, incident.loss.batch_id or ""
        command, done, refused = await taken(self.run, lambda: RepublishKept(stream, batch, incident.messages), 400)
        if command is None:
            self._republished.object = refused
            return None
        self._republished.object = html.escape(f"{command.name}: {command.said(done)}")
        return done

    async def _on_republish(self, *_: Any) -> None:
        try:
            await self.republish()
        except Exception as e:  # said beside the button: a click never ends in silence
            self._republished.object = failed(e)

    async def _verdict(self, incident: Incident | None) -> ClientVerdict | None:
        if incident is None or incident.publisher is None or self.verdicts is None:
            return None
        try:
            verdict: ClientVerdict | None = (await self.verdicts()).of(incident.publisher)
            return verdict
        except Exception:  # the incident stands without it
            return None

    def markdown(self) -> str:
        """The incident as a Markdown report."""
        assert self.incident is not None
        link = self.replay_link(self.incident)
        if link and link.startswith("/") and self.console_url:
            link = self.console_url.rstrip("/") + link
        verdict = self.verdict
        conformance = None if verdict is None else "conforms" if not verdict.failing else \
            "does not conform: fails " + ", ".join(verdict.failing) + " (`batch-console conformance`)"
        return incident_report(self.incident, link, self.clock, self.advice(self.incident), conformance,
                               self._payloads.kept(self.incident))

    async def report(self) -> io.BytesIO:
        """The incident's report download (the action export.report)."""
        if self.incident is None:
            return io.BytesIO()
        return await download(self.export, ExportReport(self.batch_id, self.incident.loss.stream or None, self.markdown))

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
