"""The Probe page: publish a test atomic or fast batch (with an injected gap or an abandonment) with the
console's own publishers, then watch it arrive on Live."""

from __future__ import annotations

import html
from typing import Awaitable, Callable

import panel as pn

from console.domain.fast_ingest import GapMode
from console.errors import ConsoleError
from console.probe import ProbeOptions, ProbeReport
from console.ui.formatting import Clocked, coroutine

Runner = Callable[[ProbeOptions, Callable[[int], None]], Awaitable[ProbeReport]]


def report_markdown(report: ProbeReport) -> str:
    e = html.escape
    lines = [f"**{e(report.kind)} probe on {e(report.stream)}**: {report.messages_sent} sent, "
             f"{report.batches_committed} batch(es) committed, {report.msgs_per_s:,.0f} msgs/s"]
    if report.abandoned_batch:
        lines.append(f"- abandoned batch `{e(report.abandoned_batch)}`: the server drops it at its batch timeout; "
                     "it shows on [Live](/) then")
    for gap in report.gaps:
        lines.append(f"- gap: {gap.lost} lost from seq {gap.first_lost_seq}")
    for err in report.errors:
        lines.append(f"- error at seq {err.seq}: [{err.err_code}] {e(err.description)}")
    if report.error:
        lines.append(f"- **ended by** {e(report.error.type)}: {e(report.error.message)}")
    if report.batch_ids:
        shown = ", ".join(f"`{e(b)}`" for b in report.batch_ids[:5])
        lines.append(f"- batch ids: {shown}" + (" …" if len(report.batch_ids) > 5 else ""))
    return "\n".join(lines)


ABANDON = "abandon the last atomic batch"


class ProbePage(Clocked, pn.viewable.Viewer):
    run = coroutine("async (ProbeOptions, progress) -> ProbeReport, on the shared connection")

    def __init__(self, **params):
        super().__init__(**params)
        self._kind = pn.widgets.RadioButtonGroup(options=["atomic", "fast"], value="atomic")
        self._stream = pn.widgets.TextInput(label="stream (created allowing both kinds when missing)",
                                            value="BATCH_PROBE")
        self._subject = pn.widgets.TextInput(label="subject", value="batch_probe.test")
        self._count = pn.widgets.IntInput(label="messages", value=100, start=1, end=1_000_000)
        self._batch_size = pn.widgets.IntInput(label="atomic: messages per batch", value=10, start=1, end=1000)
        self._flow = pn.widgets.IntInput(label="fast: flow", value=10, start=1, end=500)
        self._gap_mode = pn.widgets.Select(label="fast: gap mode", options=[m.value for m in GapMode], value="fail")
        self._skip = pn.widgets.IntInput(label="inject a gap at seq (0: none)", value=0, start=0)
        self._abandon = pn.widgets.CheckBoxGroup(options=[ABANDON])  # a lone Checkbox has no accessible name
        self._start = pn.widgets.Button(label="Publish probe", button_type="primary")
        self._status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._start.on_click(self._on_start)
        form = pn.Column(self._kind, self._stream, self._subject, self._count, self._batch_size, self._flow,
                         self._gap_mode, self._skip, self._abandon, self._start, width=360)
        self._layout = pn.Column(pn.pane.Markdown("## Probe"), pn.Row(form, self._status, sizing_mode="stretch_width"),
                                 sizing_mode="stretch_width")

    async def _on_start(self, *_) -> None:
        try:
            options = ProbeOptions(
                kind=self._kind.value, stream=self._stream.value.strip(), subject=self._subject.value.strip(),
                count=self._count.value, batch_size=self._batch_size.value, flow=self._flow.value,
                gap_mode=GapMode(self._gap_mode.value), skip_seq=self._skip.value or None,
                abandon=ABANDON in self._abandon.value)
        except (ValueError, ConsoleError) as e:
            self._status.object = f"**Not a valid probe:** {html.escape(str(e))}"
            return
        self._start.disabled = True
        self._status.object = "Publishing…"

        def progress(sent: int) -> None:
            self._status.object = f"Publishing… {sent} of {options.count} sent"

        try:
            report = await self.run(options, progress)
        except ConsoleError as e:
            self._status.object = f"**Refused:** {html.escape(str(e))}"
            return
        finally:
            self._start.disabled = False
        self._status.object = report_markdown(report)

    async def reload(self) -> None:
        """A form: nothing to read."""

    def __panel__(self):
        return self._layout
