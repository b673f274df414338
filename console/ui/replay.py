"""The Replay page: fetch and next on a durable pull consumer (with ack, nak, term, in-progress) or an
ordered peek from a sequence or a time, and "replay a batch" in batch sequence order."""

from __future__ import annotations

import base64
import dataclasses
import functools
import html
import json
from datetime import datetime
from typing import Any, TYPE_CHECKING

import panel as pn
import param

from console.actions import Actions, unaudited
from console.commands import ANSWERS, FetchMessages
from console.domain.display import Clock, as_utc
from console.domain.messages import BATCH_HEADERS, PREVIEW_BYTES, Ack, FetchResult, PullConsumer, StoredMessage, preview
from console.errors import ConsoleError
from console.ui.controls import keep_choice, on_system, permitted
from console.payloads import Payloads
from console.ui.formatting import Clocked, shows_payloads

if TYPE_CHECKING:
    from console.decoders.rules import Decoded
    from console.broker.pull import ConsumerReader

PEEK = ""  # the consumer choice that makes an ephemeral ordered consumer
PEEK_LABEL = "peek (ordered, no side effects)"
MAX_SHOWN = 100
ACK_LABELS = {Ack.ACK: "Ack", Ack.NAK: "Nak", Ack.TERM: "Term", Ack.IN_PROGRESS: "In progress"}
BATCH_STYLE = "background:#fff3bf;font-weight:600"


def message_html(m: StoredMessage, clock: Clock = Clock(), decoded: Decoded | None = None) -> str:
    """One message, every part of it escaped; batch headers highlighted. Decoded (its stream has a
    decoder): its fields first, the raw bytes on request; not decoded: why, and the raw bytes."""
    e = html.escape
    rows = "".join(f'<tr style="{BATCH_STYLE if k in BATCH_HEADERS else ""}"><td>{e(k)}</td>'
                   f'<td style="overflow-wrap:anywhere">{e(v)}</td></tr>' for k, v in m.headers)
    p = preview(m.payload)
    about = f"{p.kind}, {p.size} bytes" + (f", first {PREVIEW_BYTES} shown" if p.truncated else "")
    batch = f' · batch <b>{e(m.batch_id)}</b> #{m.batch_seq}' if m.batch_id else ""
    raw = f'<pre style="white-space:pre-wrap;overflow-wrap:anywhere">{p.text}</pre>'
    if decoded is not None and decoded.error is None:
        shown = f'<div style="color:#666">payload: {e(decoded.decoder)}, {p.size} bytes</div>' \
                f'<pre style="white-space:pre-wrap;overflow-wrap:anywhere">{e(_as_text(decoded.value))}</pre>' \
                f'<details><summary>raw ({about})</summary>{raw}</details>'
    elif decoded is not None:
        shown = (f'<div style="color:#b00" role="note">payload not decoded as {e(decoded.decoder)}: '
                 f'{e(decoded.error or "")}</div><div style="color:#666">raw: {about}</div>{raw}')
    else:
        shown = f'<div style="color:#666">payload: {about}</div>{raw}'
    return (f'<div><b>stream seq {m.stream_seq}</b> · {e(m.subject)} · {clock.when(m.time, fraction=True)}'
            f' · delivered {m.delivered}{batch}' + (f"<table>{rows}</table>" if rows else "") + shown + '</div>')


def _as_text(value: object) -> str:
    """A decoded message as indented JSON (bytes as their base64), at most PREVIEW_BYTES characters."""
    text = json.dumps(value, indent=2, ensure_ascii=False,
                      default=lambda v: {"base64": base64.b64encode(v).decode()} if isinstance(v, bytes) else str(v))
    return text if len(text) <= PREVIEW_BYTES else text[:PREVIEW_BYTES] + f"\n… ({len(text):,} characters in all)"


def parse_start_time(text: str) -> datetime | None:
    if not text.strip():
        return None
    return as_utc(datetime.fromisoformat(text.strip()))


class ReplayPage(Clocked, pn.viewable.Viewer):
    """Every choice is a param, so a notebook drives the page as a person does:
    `page.stream = "ORDERS"; result = await page.fetch()`."""

    admin = param.Parameter(doc="The streams this page's user reads: listing, consumers, peeks, batch replay "
                                "(console.queries.streams.StreamReads); fetches and acks are commands", precedence=-1)
    stream: param.Selector[str] = param.Selector(default="", objects=[""], check_on_set=False, doc="The stream read")
    consumer: param.Selector[str] = param.Selector(default=PEEK, objects={PEEK_LABEL: PEEK}, check_on_set=False,
                              doc="A durable pull consumer of the stream, or PEEK for an ordered peek")
    start_seq = param.Integer(default=0, bounds=(0, None), doc="Where a peek or a batch scan starts (0: first)")
    start_time = param.String(default="", doc="... or from this time (UTC, ISO 8601)")
    max_messages = param.Integer(default=10, bounds=(1, MAX_SHOWN), doc="Messages per fetch")
    max_bytes = param.Integer(default=0, bounds=(0, None), doc="Bytes per fetch (0: no limit)")
    expires = param.Number(default=2.0, bounds=(0.1, 60), doc="Seconds the server waits for messages")
    batch_id = param.String(default="", doc="The batch Replay batch looks for")
    status = param.String(default="Pick a stream, then Fetch or Next.", doc="What the last action did")
    system = param.String(default="", doc="Of several NATS systems, the one this page acts on (on every button)")
    messages = param.List(default=[], doc="The messages shown (StoredMessage): the last fetch, or the batch replayed")
    payloads = param.ClassSelector(class_=Payloads, default=None, precedence=-1,
                                   doc="The payload pipeline for this page's user (required): masked, then decoded")
    actions = param.Parameter(default=None, precedence=-1,
                              doc="What this page's user may do (console.actions.Actions); None: nothing audited")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._payloads = shows_payloads(self)  # the user's, fixed when the page is made
        keep_choice(self, "stream")
        keep_choice(self, "consumer")
        self._consumers: dict[str, PullConsumer] = {}
        self._peek: ConsumerReader | None = None  # the ordered peek's cursor, while its choices hold
        self._peek_key: tuple[Any, ...] | None = None
        self._shown_from: tuple[str, str | None] = ("", None)  # the stream and durable consumer of the cards shown
        self._messages = pn.Column(sizing_mode="stretch_width")
        self._cards: dict[int, pn.viewable.Viewable] = {}  # stream seq -> its card, while it awaits an answer
        self._not_decoded = 0  # of the messages shown last, those their stream's decoder could not read
        w = pn.widgets
        fetch = pn.widgets.Button(label="Fetch", button_type="primary")
        next_ = pn.widgets.Button(label="Next")
        self._fetching = (fetch, next_)
        self._not_for_you = pn.pane.Markdown("")
        replay = pn.widgets.Button(label="Replay batch")
        fetch.on_click(self._on_fetch)
        next_.on_click(self._on_next)
        replay.on_click(self._on_replay)
        controls = pn.Column(
            w.Select.from_param(self.param.stream, name="stream"), w.Select.from_param(self.param.consumer, name="consumer"),
            w.IntInput.from_param(self.param.start_seq, name="peek from stream seq (0: first)"),
            w.TextInput.from_param(self.param.start_time, name="or from time (UTC, ISO 8601)",
                                   placeholder="2026-11-21T09:30:00"),
            w.IntInput.from_param(self.param.max_messages, name="max messages"),
            w.IntInput.from_param(self.param.max_bytes, name="max bytes (0: no limit)"),
            w.FloatInput.from_param(self.param.expires, name="expires (s)"), pn.Row(fetch, next_), self._not_for_you,
            pn.pane.Markdown("### Replay a batch"), w.TextInput.from_param(self.param.batch_id, name="batch id"),
            replay, width=320)
        self._layout = pn.Column(pn.pane.Markdown("## Replay"), pn.pane.Markdown(self.param.status),
                                 pn.Row(controls, self._messages, sizing_mode="stretch_width"),
                                 sizing_mode="stretch_width")

    async def reload(self) -> None:
        """The stream list from the server; then the chosen stream's consumers."""
        names = [s.name for s in await self.admin.streams()]
        self.param.stream.objects = names if self.stream in names or not self.stream else [self.stream, *names]
        if not self.stream and names:
            self.stream = names[0]
        await self._load_consumers()

    @param.depends("stream", watch=True)
    async def _load_consumers(self) -> None:
        await self._refresh_consumers()
        self._on_choice()

    @param.depends("consumer", watch=True)
    def _on_choice(self) -> None:
        """Fetch and Next turned off, and why said, up front when this user may not fetch from the durable
        consumer chosen (a peek is anyone's)."""
        why = self._actions().allowed(FetchMessages, self.stream) if self.consumer else None
        self._not_for_you.object = permitted(list(self._fetching), why)

    async def _refresh_consumers(self) -> None:
        options = {PEEK_LABEL: PEEK}
        self._consumers = {}
        if self.stream and not self.admin.read_only:  # a fetch from a durable consumer would deliver its messages
            try:
                self._consumers = {c.name: c for c in await self.admin.consumers(self.stream)}
            except Exception as e:  # a stream named in a link that does not exist (any more)
                self.status = f"**Error:** {html.escape(str(e) or type(e).__name__)}"
        options.update({f"{c.name} ({c.pending} pending, {c.ack_pending} awaiting ack)": c.name
                        for c in self._consumers.values()})
        self.param.consumer.objects = options
        if self.consumer not in self._consumers:
            self.consumer = PEEK

    async def _open_peek(self) -> ConsumerReader | None:
        """The peek's cursor for the current choices; a new one (the old one closed) when they changed."""
        start = self._start()
        if start is None:
            return None
        key = (self.stream, self.start_seq, self.start_time)
        if self._peek is not None and key != self._peek_key:
            await self.close()
        if self._peek is None:
            self._peek = self.admin.peek(self.stream, **start)
            self._peek_key = key
        return self._peek

    def _start(self) -> dict[str, Any] | None:
        """Where a peek or a batch scan starts; None (and a message) when the time is not a time."""
        try:
            start_time = parse_start_time(self.start_time)
        except ValueError:
            self.status = f"**Not a time:** {html.escape(self.start_time)} (use 2026-11-21T09:30:00)"
            return None
        return {"start_seq": self.start_seq or None, "start_time": start_time}

    async def fetch(self, count: int | None = None) -> FetchResult | None:
        """Fetch up to max_messages (or count): from the peek's cursor, or from the durable consumer (an
        action: it delivers its messages); None when nothing was asked."""
        if not self.stream:
            self.status = "Pick a stream first."
            return None
        stream, consumer, n = self.stream, self.consumer or None, count or self.max_messages
        peek = None if consumer else await self._open_peek()
        if consumer is None and peek is None:
            return None
        self.status = "Fetching…"
        try:
            result = await (peek.fetch(n, max_bytes=self.max_bytes or None, expires=self.expires) if peek else
                            self._actions().run(FetchMessages(stream, consumer or "", n, self.max_bytes or None,
                                                              self.expires)))
        except ConsoleError as e:
            self.status = f"**Error:** {html.escape(str(e))}" + (
                "" if peek else " (a peek is anyone's; a fetch from a durable consumer delivers its messages)")
            return None
        except Exception as e:  # a stream deleted under the page, a lost connection
            self.status = f"**Error:** {html.escape(type(e).__name__)} {html.escape(str(e))}"
            await self.close()
            return None
        if self.stream != stream:  # the user picked another stream while this answer was on its way
            self.status = self._left(stream, len(result.messages))
            if peek is not None and self._peek is peek:
                await self.close()  # its cursor passed what was dropped: a next fetch starts afresh
            return None
        self._show(stream, consumer, result.messages, keep_unanswered=count == 1)
        self.status = await self._describe(result)
        return result

    @staticmethod
    def _left(stream: str, count: int) -> str:
        return (f"The answer from {html.escape(stream)} ({count} message(s)) came after another stream was picked: "
                "dropped, not shown (a durable consumer delivers them again after its ack wait).")

    def _actions(self) -> Actions:
        return self.actions or unaudited(self.admin.read_only)

    async def next(self) -> FetchResult | None:
        return await self.fetch(1)

    async def _on_fetch(self, _event: Any) -> None:
        await self.fetch()

    async def _on_next(self, _event: Any) -> None:
        await self.next()

    async def _on_replay(self, _event: Any) -> None:
        await self.replay_batch()

    async def _describe(self, result: FetchResult) -> str:
        line = f"{len(result.messages)} message(s) · ended: {html.escape(result.ended)}"
        if self._not_decoded:
            line += f" · {self._not_decoded} not decoded (shown raw, with why)"
        if result.error:
            line += f" · **Error:** {html.escape(result.error)}"
        return line + await self._consumer_state()

    async def _consumer_state(self) -> str:
        if not self.consumer:
            return ""
        await self._load_consumers()
        c = self._consumers.get(self.consumer)
        return f" · consumer {html.escape(c.name)}: {c.pending} pending, {c.ack_pending} awaiting ack" if c else ""

    def _show(self, stream: str, durable: str | None, messages: Any, keep_unanswered: bool = False) -> None:
        """The messages read from `stream`, masked by its rules and this user's payload level for it (never
        by the page's current choice, which may have changed while they were read). keep_unanswered (Next on
        a durable consumer): the cards still awaiting an answer stay, the new one after them."""
        consumer = self._consumers.get(durable) if durable is not None else None
        acks = bool(consumer and consumer.acks and not self.admin.read_only)
        self._shown_from = (stream, durable if acks else None)
        shown = [self._masked(stream, m) for m in messages[:MAX_SHOWN]]
        actions = self._actions()  # what this user may answer on this stream: the same for every card
        whys = {kind: actions.allowed(ANSWERS[kind], stream) for kind in ACK_LABELS} if acks else {}
        self._not_decoded = 0
        cards = {m.stream_seq: self._card(m, whys, stream, durable if acks else None) for m in shown}
        if keep_unanswered and acks:
            kept = [m for m in self.messages if m.stream_seq in self._cards and m.stream_seq not in cards]
            kept = kept[-(MAX_SHOWN - len(shown)):] if len(shown) < MAX_SHOWN else []
            cards = {**{m.stream_seq: self._cards[m.stream_seq] for m in kept}, **cards}
            shown = kept + shown
        self.messages = shown
        self._cards = cards if acks else {}
        self._messages.objects = list(cards.values())

    def _masked(self, stream: str, m: StoredMessage) -> StoredMessage:
        """Masked before it is kept: nothing hidden ever reaches the browser or a notebook's params."""
        headers, payload = self._payloads.masked(stream, m.headers, m.payload, m.subject)
        return dataclasses.replace(m, headers=headers, payload=payload)

    def _card(self, message: StoredMessage, whys: dict[Ack, str | None], stream: str, durable: str | None) -> pn.viewable.Viewable:
        decoded = self._payloads.decoded(stream, message.subject, message.headers, message.payload)
        self._not_decoded += bool(decoded is not None and decoded.error)
        body = pn.pane.HTML(message_html(message, self.clock, decoded), sizing_mode="stretch_width")
        if durable is None:
            return pn.Column(body, styles={"border-bottom": "1px solid #ddd"}, sizing_mode="stretch_width")
        buttons = {kind: pn.widgets.Button(label=on_system(label, self.system), button_type="light")
                   for kind, label in ACK_LABELS.items()}
        outcome = pn.pane.Markdown(permitted([buttons[kind] for kind, why in whys.items() if why],
                                             "; ".join(why for why in whys.values() if why) or None))

        async def act(kind: Ack, _event: Any = None) -> None:
            done, outcome.object = await self.act(kind, message, stream, durable)
            if done and kind is not Ack.IN_PROGRESS:
                for button in buttons.values():
                    button.disabled = True

        for kind, button in buttons.items():
            button.on_click(functools.partial(act, kind))
        return pn.Column(body, pn.Row(*buttons.values(), outcome), styles={"border-bottom": "1px solid #ddd"},
                         sizing_mode="stretch_width")

    async def act(self, kind: Ack, message: StoredMessage, stream: str | None = None,
                  durable: str | None = None) -> tuple[bool, str]:
        """Ack, nak, term or in-progress one fetched message (the action message.<kind>) on the stream and
        consumer that delivered it (default: those of the cards shown, whatever the page shows now):
        whether the server confirmed it, and what to show."""
        if stream is None:
            stream, durable = self._shown_from
        try:  # a peek's message (no durable) is refused by the command, and the attempt recorded
            await self._actions().run(ANSWERS[kind](message, stream, durable or ""))
        except ConsoleError as e:
            return False, f"**{html.escape(str(e))}**"
        if kind is not Ack.IN_PROGRESS:
            self._cards.pop(message.stream_seq, None)  # answered: Next need not keep its card
        state = await self._consumer_state()
        self.status = f"{ACK_LABELS[kind]} of stream seq {message.stream_seq} confirmed by the server{state}"
        return True, f"{ACK_LABELS[kind]} confirmed by the server.{state}"

    async def replay_batch(self) -> Any:
        """The stored messages of batch_id on the stream, in batch order (a BatchReplay), or None."""
        batch_id, stream = self.batch_id.strip(), self.stream
        if not (stream and batch_id):
            self.status = "Pick a stream and give a batch id."
            return None
        start = self._start()
        if start is None:
            return None

        def progress(scanned: int) -> None:
            if self.stream == stream:
                self.status = f"Scanning {html.escape(stream)}… {scanned} messages read"

        replay = await self.admin.replay_batch(stream, batch_id, on_progress=progress, **start)
        if self.stream != stream:
            self.status = self._left(stream, len(replay.messages))
            return None
        self._show(stream, None, replay.messages)
        if replay.messages:
            state = "complete" if replay.complete else "no commit found: incomplete"
            self.status = (f"Batch {html.escape(batch_id)}: {len(replay.messages)} stored message(s) in batch "
                           f"order, {state} (scanned {replay.scanned})")
        else:
            self.status = (f"Batch {html.escape(batch_id)}: no stored message in {replay.scanned} scanned. An "
                           "abandoned atomic batch stores nothing, and fast-ingest messages carry no batch headers.")
        return replay

    async def close(self) -> None:
        reader, self._peek, self._peek_key = self._peek, None, None
        if reader is not None:
            await reader.close()

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
