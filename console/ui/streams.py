"""The Streams page: every stream's batch settings, and an editor that knows the server's rules."""

from __future__ import annotations

import html
import logging
from typing import Any

import pandas as pd
import panel as pn
import param

from console.actions import Actions, unaudited
from console.commands import EditStream
from console.domain.batch_limits import BatchLimits, edit_risks
from console.domain.server_versions import ServerRelease
from console.domain.stream_settings import StreamBatchSettings, check_change, diff_settings
from console.errors import AuditRefused, ForbiddenError, ReadOnlyError, Refusal
from console.ui.controls import checkbox, keep_choice, permitted
from console.ui.formatting import Clocked, coroutine, tabulator
from console.ui.history import stream_cell

# The API level beside the name: a kind the server cannot take is decided on first (last, a scrollbar hid it)
COLUMNS = ["name", "required_api_level", "allow_atomic", "allow_batched", "persist_mode", "replicas", "mirror", "sources"]

log = logging.getLogger(__name__)


def streams_frame(streams: list[StreamBatchSettings]) -> pd.DataFrame:
    rows = [{"name": stream_cell(s.name), "allow_atomic": s.allow_atomic, "allow_batched": s.allow_batched,
             "persist_mode": s.persist_mode, "replicas": s.replicas, "mirror": s.is_mirror, "sources": s.sources,
             "required_api_level": s.required_api_level if s.required_api_level is not None else -1}
            for s in streams]
    return pd.DataFrame(rows, columns=COLUMNS).astype({"name": "object", "persist_mode": "object"})


def review(before: StreamBatchSettings, after: StreamBatchSettings, api_level: int | None,
           limits: BatchLimits | None = None) -> str:
    """The diff, the rules the change breaks and the risks the server allows, as escaped Markdown."""
    changes = diff_settings(before, after)
    lines = [f"- `{k}`: {html.escape(str(a))} → {html.escape(str(b))}" for k, (a, b) in changes.items()] or ["No change."]
    for rule in check_change(before, after, api_level):
        code = f" (server code {rule.err_code})" if rule.err_code else ""
        lines.append(f"- ⚠ **{rule.field}**: {html.escape(rule.message)}{code}")
    lines += [f"- ⚠ {html.escape(risk)}" for risk in edit_risks(before, after, limits)]
    return "\n".join(lines)


def server_markdown(server: ServerRelease) -> str:
    """The server's release and level, what it lacks and where it is known not to do what ADR-50 says."""
    e = html.escape
    lines = [f"Server {e(server.version or '?')}, JetStream API level {server.api_level or '?'}"]
    lines += [f"- lacks {e(f.what)}" for f in server.lacks()]
    lines += [f"- ⚠ known to differ from ADR-50: {e(d.title)} ({e(d.versions())}; see the README)"
              for d in server.divergences()]
    return "\n".join(lines)


def limits_markdown(limits: BatchLimits, source: str) -> str:
    rows = ["| limit | atomic | fast | set by |", "|---|---|---|---|"]
    rows += [f"| {r['limit']} | {r['atomic']} | {r['fast']} | {html.escape(r['set by'])} |" for r in limits.rows()]
    return f"### The server's batch limits\n{html.escape(source)}\n\n" + "\n".join(rows)


class StreamsPage(Clocked, pn.viewable.Viewer):
    """The proposed settings are params: `page.stream = "ORDERS"; page.allow_batched = True;
    await page.apply()` in a notebook does what the form does."""

    admin = param.Parameter(doc="Reads and updates streams (a StreamAdmin; refuses in read-only mode)", precedence=-1)
    limits = coroutine("async () -> (BatchLimits, where they were read)", default=None, precedence=-1)
    stream: param.Selector[str] = param.Selector(default="", objects=[""], check_on_set=False, doc="The stream edited")
    allow_atomic = param.Boolean(default=False, doc="Proposed allow_atomic")
    allow_batched = param.Boolean(default=False, doc="Proposed allow_batched")
    persist_mode: param.Selector[str] = param.Selector(default="default", objects=["default", "async"],
                                                       doc="Proposed persist_mode")
    review = param.String(default="", doc="What applying would change, and the server's rules it would meet")
    result = param.String(default="", doc="What the last apply did, or the server's refusal")
    cannot = param.String(default="", doc="Why this user may not edit the chosen stream ('' when they may)")
    server = param.ClassSelector(class_=ServerRelease, default=None, doc="The server's release and API level")
    no_batched = param.String(default="", doc="Why allow_batched cannot be switched on here (an older server)")
    actions = param.Parameter(default=None, precedence=-1,
                              doc="What this page's user may do (console.actions.Actions); None: nothing audited")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        keep_choice(self, "stream")
        self._streams: dict[str, StreamBatchSettings] = {}
        self._api_level: int | None = None
        self._limits: BatchLimits | None = None
        self._server = pn.pane.Markdown("")
        self._limits_pane = pn.pane.Markdown("", sizing_mode="stretch_width")
        # The last listing this process read, until this page's own: its first screen needs no round trip
        self._table = tabulator(streams_frame(getattr(self.admin, "last_streams", [])), disabled=True, show_index=False,
                                           sizing_mode="stretch_width", height=300,
                                           # short titles: every column in view beside the editor at 1280 px
                                           titles={"allow_atomic": "atomic", "allow_batched": "batched",
                                                   "persist_mode": "persist", "required_api_level": "API level"})
        self._apply = pn.widgets.Button(label="Apply", color="primary", visible=not self.admin.read_only)
        if self.admin.read_only:
            self.result = "Read-only mode: settings are shown, not changed."
        self._apply.on_click(self._on_apply)
        w = pn.widgets
        batched = checkbox(self, "allow_batched")
        self.param.watch(lambda e: setattr(batched, "disabled", bool(e.new)), "no_batched")
        editor = pn.Column(pn.pane.Markdown("### Batch settings"), w.Select.from_param(self.param.stream, name="stream"),
                           checkbox(self, "allow_atomic"), batched, pn.pane.Markdown(self.param.no_batched),
                           w.Select.from_param(self.param.persist_mode, name="persist_mode"),
                           pn.pane.Markdown(self.param.review), self._apply, pn.pane.Markdown(self.param.cannot),
                           pn.pane.Markdown(self.param.result),
                           width=360)
        self._layout = pn.Column(pn.pane.Markdown("## Streams"), self._server,
                                 pn.Row(self._table, editor, sizing_mode="stretch_width"), self._limits_pane,
                                 sizing_mode="stretch_width")

    async def reload(self) -> None:
        self.server = server = await self.admin.server()
        self._api_level = server.api_level
        self._server.object = server_markdown(server)
        why = server.missing_for("allow_batched")
        self.no_batched = f"allow_batched: {html.escape(why)}" if why else ""
        if self.limits is not None:
            self._limits, source = await self.limits()
            self._limits_pane.object = limits_markdown(self._limits, source)
        streams = await self.admin.streams()
        self._streams = {s.name: s for s in streams}
        self._table.value = streams_frame(streams)
        wanted = self.stream  # the select falls back to its first option when its options change
        self.param.stream.objects = list(self._streams)
        if wanted not in self._streams:
            wanted = next(iter(self._streams), "")
        if self.stream != wanted:
            self.stream = wanted  # its watcher fills the form
        else:
            self._on_stream()

    def _actions(self) -> Actions:
        return self.actions or unaudited(self.admin.read_only)

    def _proposed(self) -> StreamBatchSettings | None:
        current = self._streams.get(self.stream)
        if current is None:
            return None
        return current.with_changes(allow_atomic=self.allow_atomic, allow_batched=self.allow_batched,
                                    persist_mode=self.persist_mode)

    @param.depends("stream", watch=True)
    def _on_stream(self) -> None:
        self.cannot = permitted([self._apply], self._actions().allowed(EditStream, self.stream or None)
                                if not self.admin.read_only else None)
        current = self._streams.get(self.stream)
        if current is not None:
            self.param.update(allow_atomic=current.allow_atomic, allow_batched=current.allow_batched,
                              persist_mode=current.persist_mode)
        self._on_edit()

    @param.depends("allow_atomic", "allow_batched", "persist_mode", watch=True)
    def _on_edit(self) -> None:
        proposed = self._proposed()
        self.review = "" if proposed is None else review(self._streams[proposed.name], proposed, self._api_level,
                                                        self._limits)

    async def apply(self) -> StreamBatchSettings | None:
        """Apply the proposed settings; the updated stream, or None (result says why)."""
        current = self._streams.get(self.stream)
        if current is None:
            return None
        edit = EditStream.validate(current, allow_atomic=self.allow_atomic, allow_batched=self.allow_batched,
                                   persist_mode=self.persist_mode)
        if edit is None:
            self.result = "Nothing to apply."
            return None
        try:
            updated = await self._actions().run(edit)
        except Refusal as refused:
            self.result = f"**The server refused:** {html.escape(str(refused))}"
            return None
        except (ReadOnlyError, ForbiddenError, AuditRefused) as refused:
            self.result = html.escape(str(refused))
            return None
        self.result = f"Applied to {html.escape(updated.name)}."
        await self.reload()
        return updated

    async def _on_apply(self, _event: Any) -> None:
        try:
            await self.apply()
        except Exception as e:  # said beside the form: a click never ends in silence
            log.exception("applying the settings of %s failed", self.stream)
            self.result = f"**Failed:** {html.escape(type(e).__name__)}: {html.escape(str(e)[:300])}"

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
