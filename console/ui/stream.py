"""The page of one stream (`/stream?name=S`, linked from every stream name): its batch settings and
where it runs, the server's limits and the risks they leave, its lost batches live and over the last
7 days, its active fast batches, and links into Replay and Incident for it."""

from __future__ import annotations

import asyncio
import html
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any, TYPE_CHECKING
from urllib.parse import urlencode

import pandas as pd
import panel as pn
import param

from console.domain.batch_limits import edit_risks
from console.domain.display import count, counted, size, yes_no
from console.domain.live_model import LiveModel
from console.queries.live import SeenLive
from console.domain.server_versions import ServerRelease
from console.domain.stream_settings import StreamBatchSettings
from console.domain.wire import stream_name_problem
from console.ui.controls import refusals
from console.ui.formatting import Clocked, coroutine, put, shown, tabulator
from console.ui.history import decisions_first, incident_link, ledger_frame
from console.ui.live import active_frame, recent_frame
from console.ui.publish import PublishForm
from console.ui.streams import limits_markdown

if TYPE_CHECKING:
    from console.broker.admin import StreamPlacement

WEEK = timedelta(days=7)
RATE_OVER = 5.0  # seconds over which the stream's message rate is read, for the publish-side tap's cost
log = logging.getLogger(__name__)


def replay_link(stream: str, start_time: datetime | None = None) -> str:
    """The Replay page on a stream, peeking from a time or from its first message."""
    return "/replay?" + urlencode({"stream": stream, **({"start_time": start_time.isoformat()} if start_time else {})})


def placement_markdown(p: StreamPlacement) -> str:
    s = p.settings
    e = html.escape
    followers = ", ".join(f"{e(name)} ({'current' if current else 'behind'}, lag {count(lag)})"
                          for name, current, lag in p.replicas)
    where = (f"leader **{e(p.leader or '?')}**, followers {followers}" if followers else
             f"**{e(p.leader)}** alone (no replicas)" if p.leader else "one server (no replicas)")
    return "\n".join([
        "| allow_atomic | allow_batched | persist_mode | replicas | retention | required API level |",
        "|---|---|---|---|---|---|",
        f"| {yes_no(s.allow_atomic)} | {yes_no(s.allow_batched)} | {e(s.persist_mode)} | R{s.replicas} | {e(s.retention)} | "
        f"{s.required_api_level if s.required_api_level is not None else '-'} |",
        "",
        f"Runs on {where}; holds {counted(p.messages or 0, 'message')} ({size(p.bytes)}), "
        f"{counted(s.consumers or 0, 'consumer')}.",
    ])


def release_risks(server: ServerRelease, s: StreamBatchSettings) -> list[str]:
    """What this stream's server is known to do with batches that ADR-50 does not say (the version matrix)."""
    flags = {"allow_atomic": s.allow_atomic, "allow_batched": s.allow_batched}
    return [f"nats-server {server.version}: {d.title}. ADR-50: {d.adr_says}; this release: {d.server_does} "
            f"(scripts/repro/{d.repro})" for d in server.divergences() if d.concerns(flags, s.replicas)]


class StreamPage(Clocked, pn.viewable.Viewer):
    # Not `name`: every Parameterized has one, made up ("StreamPage00123") when none is given, so a refused
    # name in the URL had the page look up a stream of that made-up name
    stream = param.String(default="", doc="The stream shown")
    details = coroutine("async name -> StreamPlacement (raises when there is no such stream)", precedence=-1)
    limits = coroutine("async () -> (BatchLimits, where they were read)", default=None, precedence=-1)
    server = coroutine("async () -> ServerRelease: the server's release, for what it is known to get wrong",
                       default=None, precedence=-1)
    model = param.ClassSelector(class_=(LiveModel, SeenLive), default=None, precedence=-1,
                                doc="The live model, shared by sessions (as the reader sees it)")
    history = param.Parameter(default=None, doc="The history queries, or None", precedence=-1)
    placement = param.Parameter(default=None, doc="The stream as the server last described it (StreamPlacement)")
    decoders = param.Callable(default=None, allow_refs=False,
                              doc="stream -> the decoders file's lines for its messages (what reads them), or []")
    run = coroutine("async (command) -> its result: the action, checked, recorded", default=None, precedence=-1)
    may = refusals()
    read_only = param.Boolean(default=False, doc="No control that changes the server is drawn")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._week_of: object = ()  # the ledger position the week was read at (console.storage.history.ledger_position)
        self._head = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._settings = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._limits = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._tap_cost = pn.pane.Markdown("", sizing_mode="stretch_width")
        table = dict(disabled=True, show_index=False, sizing_mode="stretch_width",
                     formatters={"investigate": {"type": "html"}})
        self._live = tabulator(pd.DataFrame(), height=220, **table)
        self._week = tabulator(pd.DataFrame(), height=220, **table)
        self._active = tabulator(pd.DataFrame(), height=160, **table)
        # publishing from the console (a notebook acts through it; in read-only mode not in the document)
        self.publishing = PublishForm(stream=self.stream, run=self.run, may=self.may) if self.run is not None else None
        if self.publishing is not None:  # the URL's name can arrive after the page is made
            self.param.watch(lambda event: setattr(self.publishing, "stream", event.new), "stream")
        self._layout = pn.Column(
            self._head, self._settings, self._limits, self._tap_cost,
            pn.pane.Markdown("### Lost batches, live (the last hour)"),
            self._live, pn.pane.Markdown("### Lost batches, last 7 days (History)"), self._week,
            pn.pane.Markdown("### Active fast batches"), self._active,
            *([self.publishing] if self.publishing is not None and not self.read_only else []),
            sizing_mode="stretch_width")
        self._show_head()
        self.refresh()  # what the live model and History hold shows before the server answers

    @param.depends("stream", watch=True)
    def _refuse_a_name_no_stream_has(self) -> None:
        """The URL is kept in step with the page after it is made, and the browser's query can arrive then,
        unchecked (the page was made with the checked one): a name no stream can have is no stream shown."""
        if self.stream and stream_name_problem(self.stream) is not None:
            self.stream = ""

    def _show_head(self) -> None:
        if not self.stream:
            self._head.object = "## Stream\nOpen a stream from its name on any page, or give `?name=`."
        else:
            read_by = self.decoders(self.stream) if self.decoders is not None else []
            decoded = ("\n\nPayloads decoded as: " + "; ".join(html.escape(r) for r in read_by)) if read_by else ""
            self._head.object = (f"## Stream {html.escape(self.stream)}\n[its messages in Replay]"
                                 f"({replay_link(self.stream)}) · [its consumers' lag]"
                                 f"(/consumers?{urlencode({'stream': self.stream})}) · each lost batch below opens "
                                 f"its Incident{decoded}")

    refresh_every_ms = 2000  # Live's and History's rows of this stream

    async def reload(self) -> None:
        e = html.escape
        self._show_head()
        if not self.stream:
            self._settings.object = self._limits.object = self._tap_cost.object = ""  # a refused name's, if any
            return
        self.refresh()
        try:
            placement = await self.details(self.stream)
        except Exception as err:  # no such stream, or the server did not answer: the rest still shows
            log.info("stream %r not read: %r", self.stream, err)
            self._settings.object = f"**Not read from the server:** {e(str(err))}"
            placement = None
        self.placement = placement
        if placement is not None:
            self._settings.object = placement_markdown(placement)
            self._tap_cost.object = "Publish-side tap: measuring this stream's message rate…"
            asyncio.get_running_loop().create_task(self._measure_tap_cost(placement, time.monotonic()))
        if self.limits is not None:
            limits, source = await self.limits()
            risks = edit_risks(placement.settings, placement.settings, limits) if placement else []
            if placement is not None and self.server is not None:
                risks += release_risks(await self.server(), placement.settings)
            self._limits.object = limits_markdown(limits, source) + "".join(f"\n\n⚠ {e(r)}" for r in risks)

    async def _measure_tap_cost(self, first: StreamPlacement, at: float) -> None:
        """What tapping this stream's publish side would cost the collector: every message it stores."""
        await asyncio.sleep(RATE_OVER)
        try:
            second = await self.details(self.stream)
        except Exception as err:  # the figure is left out, never the page
            self._tap_cost.object = f"Publish-side tap: the rate was not read ({html.escape(str(err))})"
            return
        rate = max(0, second.last_seq - first.last_seq) / (time.monotonic() - at)
        self._tap_cost.object = (
            f"Publish-side tap (`--tap-publish-side` on this stream's subjects): the collector receives every "
            f"message published here, about **{rate:,.1f} msgs/s** now (this stream's rate over {RATE_OVER:g} s), "
            "for the stream of each fast batch from its first message and every drop judged on time.")

    def refresh(self) -> None:
        """Live's tables of this stream; its week in History when the job has run since the last read."""
        if not self.stream:
            return
        with pn.io.hold():
            if self.model is not None:  # Live's tables, of this stream (so without its column)
                put(self._live, recent_frame(self.model, clock=self.clock, stream=self.stream).drop(columns=["stream"]))
                put(self._active, active_frame(self.model, stream=self.stream).drop(columns=["stream"]))
            if self.history is not None and (position := self.history.ledger_position()) != self._week_of:
                now = datetime.now(timezone.utc)
                week = self.history.abandoned_batches(now - WEEK, now, stream=self.stream)
                week = ledger_frame(shown(week.drop(columns=["stream"]), self.clock))
                week["investigate"] = [incident_link(b) for b in week["batch_id"]]
                put(self._week, decisions_first(week))
                self._week_of = position

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout

