"""The Streams page: every stream's batch settings, and an editor that knows the server's rules."""

from __future__ import annotations

import html

import pandas as pd
import panel as pn
import param

from console.broker.admin import StreamAdmin
from console.domain.stream_settings import StreamBatchSettings, check_change, diff_settings
from console.errors import ReadOnlyError, Refusal

COLUMNS = ["name", "allow_atomic", "allow_batched", "persist_mode", "replicas", "mirror", "sources", "required_api_level"]


def streams_frame(streams: list[StreamBatchSettings]) -> pd.DataFrame:
    rows = [{"name": s.name, "allow_atomic": s.allow_atomic, "allow_batched": s.allow_batched,
             "persist_mode": s.persist_mode, "replicas": s.replicas, "mirror": s.is_mirror, "sources": s.sources,
             "required_api_level": s.required_api_level if s.required_api_level is not None else -1}
            for s in streams]
    return pd.DataFrame(rows, columns=COLUMNS).astype({"name": "object", "persist_mode": "object"})


def review(before: StreamBatchSettings, after: StreamBatchSettings, api_level: int | None) -> str:
    """The diff and the rules the change breaks, as escaped Markdown."""
    changes = diff_settings(before, after)
    if not changes:
        return "No change."
    lines = [f"- `{k}`: {html.escape(str(a))} → {html.escape(str(b))}" for k, (a, b) in changes.items()]
    for rule in check_change(before, after, api_level):
        code = f" (server code {rule.err_code})" if rule.err_code else ""
        lines.append(f"- ⚠ **{rule.field}**: {html.escape(rule.message)}{code}")
    return "\n".join(lines)


class StreamsPage(pn.viewable.Viewer):
    admin = param.ClassSelector(class_=StreamAdmin, doc="Reads and updates streams (refuses in read-only mode)")

    def __init__(self, **params):
        super().__init__(**params)
        self._streams: dict[str, StreamBatchSettings] = {}
        self._api_level: int | None = None
        self._server = pn.pane.Markdown("")
        self._table = pn.widgets.Tabulator(streams_frame([]), disabled=True, show_index=False,
                                           sizing_mode="stretch_width", height=300)
        self._stream = pn.widgets.Select(label="stream", options=[])
        self._atomic = pn.widgets.Checkbox(label="allow_atomic")
        self._batched = pn.widgets.Checkbox(label="allow_batched")
        self._persist = pn.widgets.Select(label="persist_mode", options=["default", "async"])
        self._review = pn.pane.Markdown("")
        self._result = pn.pane.Markdown("")
        self._apply = pn.widgets.Button(label="Apply", color="primary", visible=not self.admin.read_only)
        if self.admin.read_only:
            self._result.object = "Read-only mode: settings are shown, not changed."
        self._stream.param.watch(self._on_stream, "value")
        for widget in (self._atomic, self._batched, self._persist):
            widget.param.watch(self._on_edit, "value")
        self._apply.on_click(self._on_apply)
        editor = pn.Column(pn.pane.Markdown("### Batch settings"), self._stream, self._atomic, self._batched,
                           self._persist, self._review, self._apply, self._result, width=420)
        self._layout = pn.Column(pn.pane.Markdown("## Streams"), self._server,
                                 pn.Row(self._table, editor, sizing_mode="stretch_width"), sizing_mode="stretch_width")

    async def reload(self) -> None:
        server = await self.admin.server()
        self._api_level = server.api_level
        self._server.object = f"Server {server.version or '?'}, JetStream API level {server.api_level or '?'}"
        streams = await self.admin.streams()
        self._streams = {s.name: s for s in streams}
        self._table.value = streams_frame(streams)
        self._stream.options = list(self._streams)
        self._on_stream()

    def _proposed(self) -> StreamBatchSettings | None:
        current = self._streams.get(self._stream.value)
        if current is None:
            return None
        return current.with_changes(allow_atomic=self._atomic.value, allow_batched=self._batched.value,
                                    persist_mode=self._persist.value)

    def _on_stream(self, *_) -> None:
        current = self._streams.get(self._stream.value)
        if current is not None:
            self._atomic.value, self._batched.value = current.allow_atomic, current.allow_batched
            self._persist.value = current.persist_mode
        self._on_edit()

    def _on_edit(self, *_) -> None:
        proposed = self._proposed()
        self._review.object = "" if proposed is None else review(self._streams[proposed.name], proposed, self._api_level)

    async def _on_apply(self, *_) -> None:
        proposed = self._proposed()
        if proposed is None:
            return
        changes = {k: b for k, (_, b) in diff_settings(self._streams[proposed.name], proposed).items()}
        if not changes:
            self._result.object = "Nothing to apply."
            return
        try:
            updated = await self.admin.apply(proposed.name, **changes)
        except Refusal as refused:
            self._result.object = f"**The server refused:** {html.escape(str(refused))}"
            return
        except ReadOnlyError as refused:
            self._result.object = html.escape(str(refused))
            return
        self._result.object = f"Applied to {html.escape(updated.name)}."
        await self.reload()

    def __panel__(self):
        return self._layout
