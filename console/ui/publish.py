"""The stream page's publish form: one message with headers on a subject of the stream (message.publish),
or a range of its stored messages again on a subject of a stream (message.republish); each an audited
action, the server's answer or its refusal (its code and text) said beside the form. Not drawn in
read-only mode."""

from __future__ import annotations

import functools
import html
import logging
from typing import Any

import panel as pn
import param

from console.commands import PublishMessage, RepublishMessages
from console.domain.publishing import MAX_PAYLOAD, MAX_REPUBLISH, header_pair
from console.ui.controls import failed, permitted, refusals, taken
from console.ui.formatting import coroutine

log = logging.getLogger(__name__)


class PublishForm(pn.viewable.Viewer):
    stream = param.String(default="", doc="The stream it publishes to")
    run = coroutine("async (command) -> its result: the action, checked, recorded")
    may = refusals()
    subject = param.String(default="", doc="A subject of the stream")
    payload = param.String(default="", doc="The payload, as text (UTF-8)")
    headers = param.String(default="", doc="Headers, one 'Name: value' a line")
    first = param.Integer(default=1, bounds=(1, 2 ** 53 - 1), doc="The first stored message to republish")
    last = param.Integer(default=1, bounds=(1, 2 ** 53 - 1), doc="The last (1,000 at most in all)")
    to_subject = param.String(default="", doc="The subject they go to")
    to_stream = param.String(default="", doc="The stream that stores it (empty: this one)")
    result = param.String(default="", doc="What the last action did, or why it was refused")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)  # type: ignore[no-untyped-call]  # param's constructor has no types
        w = pn.widgets
        self._buttons = {"publish": w.Button(label="Publish", width=100), "republish": w.Button(label="Republish", width=110)}
        for name, button in self._buttons.items():
            button.on_click(functools.partial(self._act, name))
        self._layout = pn.Column(
            pn.pane.Markdown("### Publish a message"),
            pn.Row(w.TextInput.from_param(self.param.subject, name="subject", width=260),
                   w.TextAreaInput.from_param(self.param.payload, name="payload", width=320, height=70),
                   w.TextAreaInput.from_param(self.param.headers, name="headers (Name: value a line)", width=260, height=70),
                   self._buttons["publish"]),
            pn.pane.Markdown("### Republish stored messages"),
            pn.Row(w.IntInput.from_param(self.param.first, name="from seq", width=110),
                   w.IntInput.from_param(self.param.last, name="to seq", width=110),
                   w.TextInput.from_param(self.param.to_subject, name="to subject", width=220),
                   w.TextInput.from_param(self.param.to_stream, name="to stream", width=160),
                   self._buttons["republish"]),
            pn.pane.Markdown(self.param.result), sizing_mode="stretch_width")
        self._permit()

    @param.depends("stream", "to_stream", watch=True)
    def _permit(self) -> None:
        said = [permitted([self._buttons["publish"]], self.may(PublishMessage, self.stream or None)),
                permitted([self._buttons["republish"]],
                          self.may(RepublishMessages, self.stream or None) or
                          self.may(RepublishMessages, self.to_stream.strip() or self.stream or None))]
        if any(said) and not self.result.startswith("**The server refused"):
            self.result = next(s for s in said if s)

    def command(self, name: str) -> PublishMessage | RepublishMessages:
        """The action the form asks for (ValueError for a form that does not make one)."""
        if name == "publish":
            payload = self.payload.encode()
            if len(payload) > MAX_PAYLOAD:
                raise ValueError(f"a payload of at most {MAX_PAYLOAD:,} bytes")
            headers = tuple(header_pair(line) for line in self.headers.splitlines() if line.strip())
            return PublishMessage(self.stream, self.subject.strip(), payload, headers)
        if not self.first <= self.last or self.last - self.first >= MAX_REPUBLISH:
            raise ValueError(f"from seq <= to seq, {MAX_REPUBLISH} messages at most")
        return RepublishMessages(self.stream, self.first, self.last, self.to_stream.strip() or self.stream,
                                 self.to_subject.strip())

    async def act(self, name: str) -> object:
        """One action from the form (a button; a notebook calls it): its result, or None (`result` says why)."""
        command, done, refused = await taken(self.run, lambda: self.command(name), 400)
        if command is None:  # read-only, the role, what may not be sent, the server's refusal
            self.result = refused
            return None
        self.result = html.escape(f"{command.name} {command.target}: {command.said(done)}")
        return done

    async def _act(self, name: str, _event: object = None) -> None:
        try:
            await self.act(name)
        except Exception as e:  # said beside the form: a click never ends in silence
            log.exception("%s failed", name)
            self.result = failed(e)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
