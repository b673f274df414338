"""The Consumers page (`/consumers`, `?stream=S` for one stream's, linked from the stream page): every
consumer's pending, ack pending, redeliveries, waiting pulls and lag in seconds, its state on Burrow's
rules (stalled, lagging, paused, ok, caught up), its trend and time to catch up, gravest first and
sortable by any column, the lags drawn; and the changes an operator makes to one (pause, resume, reset,
delete), each an audited action, its refusal (the role, read-only mode, the server's code and text)
said beside the form."""

from __future__ import annotations

import asyncio
import functools
import html
import logging
import time
from datetime import datetime, timezone
from typing import Any, cast

import pandas as pd
import panel as pn
import param
from bokeh.models import ColumnDataSource, FactorRange
from bokeh.plotting import figure

from console.commands import ConsumerCommand, DeleteConsumer, PauseConsumer, ResetConsumer, ResumeConsumer, UnpinConsumer
from console.consumers import Reading, age, batches
from console.domain.consumer_lag import STATES, pause_end
from console.domain.toml_text import duration
from console.domain.wire import printable
from console.ui.controls import failed, permitted, refusals, taken
from console.ui.formatting import Clocked, coroutine, tabulator
from console.ui.history import stream_cell

log = logging.getLogger(__name__)
COLUMNS = ["state", "stream", "consumer", "kind", "pending", "ack pending", "redelivered", "waiting", "lag s",
           "trend", "batches", "why"]
COLOURS = {"stalled": "#c92a2a", "lagging": "#e67700", "paused": "#1971c2"}
DRAWN = 15  # consumers in the plot: the most behind
CONFIRM_WITHIN = 10.0  # seconds in which a delete's second click deletes


def trend(judged: Any) -> str:
    """Its trend, and the time to catch up at that rate: 'catching up, 2 min'."""
    said = (judged.trend or "").replace("_", " ")
    if judged.state in ("caught_up", "paused") or judged.catch_up_s is None or not said:
        return said
    return f"{said}, {age(judged.catch_up_s)}"


def where(domain: str, stream: str) -> str:
    """A stream as the page names it: a leaf node's with its JetStream domain."""
    return f"{domain}:{stream}" if domain else stream


class ConsumersPage(Clocked, pn.viewable.Viewer):
    consumers = coroutine("async (stream or None, fresh_within s) -> Reading: every consumer the reader sees, judged")
    last = param.Callable(default=None, allow_refs=False,
                          doc="(stream or None) -> Reading or None: what the process last read (the first answer's)")
    run = coroutine("async (command) -> its result: the action, checked, recorded", default=None)
    may = refusals()
    read_only = param.Boolean(default=False, doc="No control that changes the server is drawn")
    stream = param.String(default="", doc="Only this stream's consumers")
    rows = param.DataFrame(default=pd.DataFrame(columns=COLUMNS), doc="Every consumer shown, as plain values")
    state = param.String(default="", doc="How many consumers, the gravest states, when read")
    chosen: param.Selector[str] = param.Selector(default="", objects=[""], doc="The consumer the form acts on "
                                                                           "(stream/consumer; a leaf's domain:stream/consumer)")
    pause_for = param.String(default="10m", doc="How long a pause lasts (30s, 5m, 1h, 1d)")
    group = param.String(default="", doc="The priority group whose pinned client an unpin lets go")
    reset_seq = param.Integer(default=1, bounds=(1, 2 ** 53 - 1), doc="The stream sequence a reset starts from")
    result = param.String(default="", doc="What the last change did, or why it was refused (the server's code and text)")

    refresh_every_ms = 10_000

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._table = tabulator(self.rows, height=420, formatters={"state": {"type": "html"}, "why": {"type": "textarea"}},
                                widths={"why": 200, "consumer": 130, "trend": 140, "batches": 130},
                                titles={"ack pending": "ack pend.", "redelivered": "redeliv."})
        self._plot = figure(title="Lag in seconds: the consumers most behind", height=240,
                            y_range=FactorRange(factors=[""]),
                            sizing_mode="stretch_width", toolbar_location=None)
        self._source = ColumnDataSource({"who": [], "lag": []})
        self._plot.hbar(y="who", right="lag", height=0.7, source=self._source)
        self._drawn = pn.pane.Bokeh(self._plot, sizing_mode="stretch_width")
        # the plot is put in and taken out (nothing behind: no empty frame); a Bokeh pane's visible toggled by
        # the periodic refresh left an empty frame drawn in Chromium (the first hour's screenshot)
        self._plot_place = pn.Column(sizing_mode="stretch_width")
        self._drawing = asyncio.Lock()
        self._armed: tuple[str, float] | None = None  # a delete asked once: (consumer, when), done on a second ask
        self._targets: dict[str, tuple[str, str, str]] = {}  # chosen -> (domain, stream, consumer)
        w = pn.widgets
        controls: list[Any] = []
        self._buttons: dict[str, pn.widgets.Button] = {}  # none in read-only mode
        if not self.read_only and self.run is not None:  # in read-only mode not even in the document
            self._buttons = {"pause": w.Button(label="Pause for", width=100), "resume": w.Button(label="Resume", width=100),
                             "reset": w.Button(label="Reset to seq", width=120), "unpin": w.Button(label="Unpin", width=80),
                             "delete": w.Button(label="Delete", button_type="danger", width=100)}
            for name, button in self._buttons.items():
                button.on_click(functools.partial(self._act, name))  # a coroutine function, which Panel awaits
            controls = [pn.Row(w.Select.from_param(self.param.chosen, name="consumer", width=320),
                               self._buttons["pause"], w.TextInput.from_param(self.param.pause_for, name="for", width=80),
                               self._buttons["resume"], self._buttons["reset"],
                               w.IntInput.from_param(self.param.reset_seq, name="sequence", width=110),
                               self._buttons["unpin"], w.TextInput.from_param(self.param.group, name="group", width=90),
                               self._buttons["delete"]),
                        pn.pane.Markdown(self.param.result)]
        self._layout = pn.Column(pn.pane.Markdown("## Consumers"), pn.pane.Markdown(self.param.state),
                                 pn.widgets.TextInput.from_param(self.param.stream, name="stream", width=220),
                                 *controls, self._table, self._plot_place, sizing_mode="stretch_width")

    def recall(self) -> None:
        """What the process last read (its time said), for the first answer, before reload reads again."""
        found = self.last(self.stream.strip() or None) if self.last is not None else None
        if found is not None and found.at is not None:
            self._show(found)

    async def reload(self, fresh_within: float | None = None) -> None:
        async with self._drawing:  # a click's reload and the refresh's, one after the other
            try:
                found = await self.consumers(self.stream.strip() or None, fresh_within)
            except Exception as e:  # the server away: said, read again at the next refresh
                self.state = f"The consumers were not read: {html.escape(str(e)[:300] or type(e).__name__)}"
                return
            self._show(found)

    async def refresh(self) -> None:
        await self.reload()

    @param.depends("stream", watch=True)
    async def _narrowed(self) -> None:
        await self.reload()

    def _show(self, found: Reading) -> None:
        # Every change of one read sent as one, under the document's lock (CI: a change made from the delete's
        # click handler while the 10 s refresh held the document raised Bokeh's "_pending_writes" error)
        with pn.io.hold():
            self._shown(found)

    def _shown(self, found: Reading) -> None:
        judged = sorted(found.judged, key=lambda j: (STATES.index(j.state), -(j.lag_seconds or 0), j.read.stream, j.read.name))
        rows = [{"state": j.state, "stream": where(j.domain, j.read.stream), "consumer": j.read.name, "kind": j.read.kind,
                 "pending": j.read.pending, "ack pending": j.read.ack_pending, "redelivered": j.read.redelivered,
                 "waiting": j.read.waiting, "lag s": None if j.lag_seconds is None else round(j.lag_seconds, 1),
                 "trend": trend(j),
                 "batches": batches(j) if j.batches else "",
                 "why": j.why + (f"; inside atomic batch {j.inside_batch} ({j.read_of_batch} of its messages given)"
                                 if j.inside_batch else "")} for j in judged]
        self.rows = pd.DataFrame(rows, columns=COLUMNS)
        shown = self.rows.copy()
        shown["state"] = [f'<b style="color:{COLOURS.get(s, "inherit")}">{s.replace("_", " ")}</b>' for s in shown["state"]]
        shown["stream"] = [stream_cell(j.read.stream) if not j.domain else html.escape(where(j.domain, j.read.stream))
                           for j in judged]  # a leaf's stream has no page here
        self._table.height = min(420, 60 + 32 * len(shown))  # no blank screen under a few rows
        self._table.value = shown
        counts = {s: sum(j.state == s for j in judged) for s in STATES}
        grave = ", ".join(f"**{n} {s}**" for s, n in counts.items() if n and s in ("stalled", "lagging"))
        unread = "; ".join(f"{html.escape(printable(s, 100))}: {html.escape(printable(w, 200))}"
                           for s, w in sorted(found.unread.items()))
        self.state = (f"{len(judged)} consumer(s)" + (f" of {html.escape(self.stream.strip())}" if self.stream.strip() else "")
                      + (f": {grave}" if grave else ", none stalled or lagging")
                      + (f", read {self.clock.when(found.at)} in {found.seconds:.2f} s" if found.at else "")
                      + ". Stalled: its position unmoved over the window while messages wait; lagging: what waits "
                        "grew at every read." + (f" **Not read:** {unread}" if unread else ""))
        self._targets = {f"{where(j.domain, j.read.stream)}/{j.read.name}": (j.domain, j.read.stream, j.read.name)
                         for j in judged}
        options = list(self._targets)
        self.param.chosen.objects = options or [""]
        if self.chosen not in options:
            self.chosen = options[0] if options else ""
        drawn = sorted((j for j in judged if j.lag_seconds), key=lambda j: j.lag_seconds or 0)[-DRAWN:]
        who = [printable(f"{where(j.domain, j.read.stream)}/{j.read.name}", 60) for j in drawn]
        cast(FactorRange, self._plot.y_range).factors = who or [""]
        self._source.data = {"who": who, "lag": [j.lag_seconds for j in drawn]}
        if bool(self._plot_place.objects) != bool(drawn):  # nothing behind: no empty frame
            self._plot_place.objects = [self._drawn] if drawn else []
        if self.run is not None and not self.read_only:
            self._permit()

    @param.depends("chosen", watch=True)
    def _permit(self) -> None:
        if not self._buttons:
            return
        stream = self._targets[self.chosen][1] if self.chosen in self._targets else None
        why = {name: self.may(cls, stream) for name, cls in (("pause", PauseConsumer), ("resume", ResumeConsumer),
                                                              ("reset", ResetConsumer), ("unpin", UnpinConsumer),
                                                              ("delete", DeleteConsumer))}
        said = [permitted([self._buttons[name]], reason) for name, reason in why.items()]
        if any(said) and not self.result.startswith("**The server refused"):
            self.result = next(s for s in said if s)

    def command(self, name: str) -> ConsumerCommand[Any]:
        """The command the form asks for (ValueError for a form that does not make one)."""
        if self.chosen not in self._targets:
            raise ValueError("choose a consumer")
        domain, stream, consumer = self._targets[self.chosen]
        if name == "pause":
            now = datetime.now(timezone.utc)
            span = duration(self.pause_for, "pause for", None, lambda why, _: ValueError(why))
            return PauseConsumer(stream, consumer, pause_end(now + span, now), domain=domain)
        if name == "reset":
            return ResetConsumer(stream, consumer, seq=self.reset_seq, domain=domain)
        if name == "unpin":
            if not 0 < len(self.group.strip()) <= 16 or not self.group.strip().isprintable():
                raise ValueError("give the priority group (1 to 16 characters)")
            return UnpinConsumer(stream, consumer, self.group.strip(), domain=domain)
        if name == "delete" and not self._confirmed():
            raise ValueError(f"Delete {self.chosen} and its position for good? Click Delete again within "
                             f"{CONFIRM_WITHIN:.0f} s.")
        return (ResumeConsumer if name == "resume" else DeleteConsumer)(stream, consumer, domain=domain)

    def _confirmed(self) -> bool:
        """A delete is asked twice, for the same consumer, within CONFIRM_WITHIN seconds."""
        armed, now = self._armed, time.monotonic()
        if armed is not None and armed[0] == self.chosen and now - armed[1] <= CONFIRM_WITHIN:
            self._armed = None
            return True
        self._armed = (self.chosen, now)
        return False

    async def act(self, name: str) -> object:
        """One change to the chosen consumer (a button; a notebook calls it): its result, or None (`result` says why)."""
        command, done, refused = await taken(self.run, lambda: self.command(name))
        if command is None:
            self.result = refused
            return None
        said = command.said(done) if done is not None else ""
        self.result = f"{html.escape(command.name)} {html.escape(command.target)}: done" + (f" ({html.escape(said)})" if said else "")
        await self.reload(fresh_within=0)  # what the server says now, not the read before the change
        return done

    async def _act(self, name: str, _event: object = None) -> None:
        try:
            await self.act(name)
        except Exception as e:  # said beside the form: a click never ends in silence
            log.exception("consumer %s failed", name)
            self.result = failed(e)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout

