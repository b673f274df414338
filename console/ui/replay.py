"""The Replay page: fetch and next on a durable pull consumer (with ack, nak, term, in-progress) or an
ordered peek from a sequence or a time, and "replay a batch" in batch sequence order."""

from __future__ import annotations

import functools
import html
from datetime import datetime, timezone

import panel as pn
import param

from console.broker.admin import PullConsumer, StreamAdmin
from console.broker.pull import Ack, ConsumerReader, FetchResult
from console.domain.messages import BATCH_HEADERS, PREVIEW_BYTES, StoredMessage, preview
from console.errors import ConsoleError

PEEK = ""  # the consumer choice that makes an ephemeral ordered consumer
MAX_SHOWN = 100
ACK_LABELS = {Ack.ACK: "Ack", Ack.NAK: "Nak", Ack.TERM: "Term", Ack.IN_PROGRESS: "In progress"}
BATCH_STYLE = "background:#fff3bf;font-weight:600"


def message_html(m: StoredMessage) -> str:
    """One message, every part of it escaped; batch headers highlighted."""
    e = html.escape
    rows = "".join(f'<tr style="{BATCH_STYLE if k in BATCH_HEADERS else ""}"><td>{e(k)}</td><td>{e(v)}</td></tr>'
                   for k, v in m.headers)
    p = preview(m.payload)
    about = f"{p.kind}, {p.size} bytes" + (f", first {PREVIEW_BYTES} shown" if p.truncated else "")
    batch = f' · batch <b>{e(m.batch_id)}</b> #{m.batch_seq}' if m.batch_id else ""
    return (f'<div><b>stream seq {m.stream_seq}</b> · {e(m.subject)} · {m.time:%Y-%m-%d %H:%M:%S.%f} UTC'
            f' · delivered {m.delivered}{batch}'
            + (f"<table>{rows}</table>" if rows else "")
            + f'<div style="color:#666">payload: {about}</div><pre style="white-space:pre-wrap">{p.text}</pre></div>')


def parse_start_time(text: str) -> datetime | None:
    if not text.strip():
        return None
    moment = datetime.fromisoformat(text.strip())
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class ReplayPage(pn.viewable.Viewer):
    admin = param.ClassSelector(class_=StreamAdmin, doc="Streams, consumers and readers on the shared connection")
    stream = param.String(default="", doc="The stream picked when the page opens (a link from an incident)")
    start_time = param.String(default="", doc="The peek's start time when the page opens")

    def __init__(self, **params):
        super().__init__(**params)
        self._consumers: dict[str, PullConsumer] = {}
        self._reader: ConsumerReader | None = None
        self._stream = pn.widgets.Select(label="stream", options=[])
        self._consumer = pn.widgets.Select(label="consumer", options={"peek (ordered, no side effects)": PEEK})
        self._start_seq = pn.widgets.IntInput(label="peek from stream seq (0: first)", value=0, start=0)
        self._start_time = pn.widgets.TextInput(label="or from time (UTC, ISO 8601)", placeholder="2026-11-21T09:30:00",
                                                value=self.start_time)
        self._max_messages = pn.widgets.IntInput(label="max messages", value=10, start=1, end=MAX_SHOWN)
        self._max_bytes = pn.widgets.IntInput(label="max bytes (0: no limit)", value=0, start=0)
        self._expires = pn.widgets.FloatInput(label="expires (s)", value=2.0, start=0.1, end=60)
        self._fetch = pn.widgets.Button(label="Fetch", button_type="primary")
        self._next = pn.widgets.Button(label="Next")
        self._batch_id = pn.widgets.TextInput(label="batch id")
        self._replay = pn.widgets.Button(label="Replay batch")
        self._status = pn.pane.Markdown("Pick a stream, then Fetch or Next.")
        self._messages = pn.Column(sizing_mode="stretch_width")
        self._stream.param.watch(self._on_stream, "value")
        for widget in (self._consumer, self._start_seq, self._start_time):
            widget.param.watch(self._on_cursor, "value")
        self._fetch.on_click(self._on_fetch)
        self._next.on_click(self._on_next)
        self._replay.on_click(self._on_replay)
        controls = pn.Column(self._stream, self._consumer, self._start_seq, self._start_time, self._max_messages,
                             self._max_bytes, self._expires, pn.Row(self._fetch, self._next),
                             pn.pane.Markdown("### Replay a batch"), self._batch_id, self._replay, width=320)
        self._layout = pn.Column(pn.pane.Markdown("## Replay"), self._status,
                                 pn.Row(controls, self._messages, sizing_mode="stretch_width"),
                                 sizing_mode="stretch_width")

    async def reload(self) -> None:
        self._stream.options = [s.name for s in await self.admin.streams()]
        if self.stream in self._stream.options:
            self._stream.value = self.stream
        await self._load_consumers()

    async def _load_consumers(self) -> None:
        if not self._stream.value:
            return
        options = {"peek (ordered, no side effects)": PEEK}
        if self.admin.read_only:  # a fetch from a durable consumer would deliver its messages
            self._consumer.options = options
            return
        self._consumers = {c.name: c for c in await self.admin.consumers(self._stream.value)}
        options.update({f"{c.name} ({c.pending} pending, {c.ack_pending} awaiting ack)": c.name
                        for c in self._consumers.values()})
        self._consumer.options = options

    async def _on_stream(self, *_) -> None:
        await self.close()
        await self._load_consumers()

    async def _on_cursor(self, *_) -> None:
        await self.close()  # the next fetch starts a new cursor with these choices

    async def _open_reader(self) -> ConsumerReader | None:
        if self._reader is not None:
            return self._reader
        if not self._stream.value:
            self._status.object = "Pick a stream first."
            return None
        start = self._start()
        if start is None:
            return None
        self._reader = self.admin.reader(self._stream.value, self._consumer.value or None, **start)
        return self._reader

    def _start(self) -> dict | None:
        """Where a peek or a batch scan starts; None (and a message) when the time is not a time."""
        try:
            start_time = parse_start_time(self._start_time.value)
        except ValueError:
            self._status.object = f"**Not a time:** {html.escape(self._start_time.value)} (use 2026-11-21T09:30:00)"
            return None
        return {"start_seq": self._start_seq.value or None, "start_time": start_time}

    async def _on_fetch(self, *_) -> None:
        await self._pull(self._max_messages.value)

    async def _on_next(self, *_) -> None:
        await self._pull(1)

    async def _pull(self, count: int) -> None:
        reader = await self._open_reader()
        if reader is None:
            return
        self._status.object = "Fetching…"
        try:
            result = await reader.fetch(count, max_bytes=self._max_bytes.value or None, expires=self._expires.value)
        except ConsoleError as e:
            self._status.object = f"**Error:** {html.escape(str(e))}"
            return
        except Exception as e:  # nats-py errors (a stream deleted under the page, a lost connection)
            self._status.object = f"**Error:** {html.escape(type(e).__name__)} {html.escape(str(e))}"
            await self.close()
            return
        self._show(reader, result.messages)
        self._status.object = await self._describe(result)

    async def _describe(self, result: FetchResult) -> str:
        line = f"{len(result.messages)} message(s) · ended: {html.escape(result.ended)}"
        if result.error:
            line += f" · **Error:** {html.escape(result.error)}"
        return line + await self._consumer_state()

    async def _consumer_state(self) -> str:
        if not self._consumer.value:
            return ""
        await self._load_consumers()
        c = self._consumers.get(self._consumer.value)
        return f" · consumer {html.escape(c.name)}: {c.pending} pending, {c.ack_pending} awaiting ack" if c else ""

    def _show(self, reader: ConsumerReader | None, messages) -> None:
        acks = (reader is not None and not reader.peek and not self.admin.read_only
                and self._consumers.get(reader.durable, PullConsumer("", False, 0, 0)).acks)
        self._messages.objects = [self._card(reader if acks else None, m) for m in messages[:MAX_SHOWN]]

    def _card(self, reader: ConsumerReader | None, message: StoredMessage):
        body = pn.pane.HTML(message_html(message), sizing_mode="stretch_width")
        if reader is None:
            return pn.Column(body, styles={"border-bottom": "1px solid #ddd"}, sizing_mode="stretch_width")
        outcome = pn.pane.Markdown("")
        buttons = {kind: pn.widgets.Button(label=label, button_type="light") for kind, label in ACK_LABELS.items()}

        async def act(kind: Ack, _event=None) -> None:
            try:
                await reader.ack(message, kind)
            except ConsoleError as e:
                outcome.object = f"**{html.escape(str(e))}**"
                return
            outcome.object = f"{ACK_LABELS[kind]} confirmed by the server.{await self._consumer_state()}"
            if kind is not Ack.IN_PROGRESS:
                for button in buttons.values():
                    button.disabled = True

        for kind, button in buttons.items():
            button.on_click(functools.partial(act, kind))
        return pn.Column(body, pn.Row(*buttons.values(), outcome), styles={"border-bottom": "1px solid #ddd"},
                         sizing_mode="stretch_width")

    async def _on_replay(self, *_) -> None:
        batch_id = self._batch_id.value.strip()
        if not (self._stream.value and batch_id):
            self._status.object = "Pick a stream and give a batch id."
            return
        start = self._start()
        if start is None:
            return

        def progress(scanned: int) -> None:
            self._status.object = f"Scanning {html.escape(self._stream.value)}… {scanned} messages read"

        replay = await self.admin.replay_batch(self._stream.value, batch_id, on_progress=progress, **start)
        self._show(None, replay.messages)
        if replay.messages:
            state = "complete" if replay.complete else "no commit found: incomplete"
            self._status.object = (f"Batch {html.escape(batch_id)}: {len(replay.messages)} stored message(s) in batch "
                                   f"order, {state} (scanned {replay.scanned})")
        else:
            self._status.object = (f"Batch {html.escape(batch_id)}: no stored message in {replay.scanned} scanned. An "
                                   "abandoned atomic batch stores nothing, and fast-ingest messages carry no batch headers.")

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()

    def __panel__(self):
        return self._layout
