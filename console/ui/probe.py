"""The Probe page: publish a test atomic or fast batch (with an injected gap or an abandonment) with the
console's own publishers, then watch it arrive on Live."""

from __future__ import annotations

import html
from typing import Any, Awaitable, Callable

import panel as pn
import param

from console.domain.fast_ingest import GapMode
from console.commands import RunProbe
from console.errors import ConsoleError
from console.probe import ProbeOptions, ProbeReport
from console.ui.controls import permitted, refusals
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
    kind: param.Selector[str] = param.Selector(default="atomic", objects=["atomic", "fast"], doc="Which kind of batch")
    stream = param.String(default="BATCH_PROBE", doc="stream (created allowing both kinds when missing)")
    subject = param.String(default="batch_probe.test", doc="subject")
    count = param.Integer(default=100, bounds=(1, 1_000_000), doc="messages")
    batch_size = param.Integer(default=10, bounds=(1, 1000), doc="atomic: messages per batch")
    flow = param.Integer(default=10, bounds=(1, 500), doc="fast: flow")
    gap_mode: param.Selector[str] = param.Selector(default="fail", objects=[m.value for m in GapMode],
                                                   doc="fast: gap mode")
    skip_seq = param.Integer(default=0, bounds=(0, None), doc="inject a gap at seq (0: none)")
    abandon = param.Boolean(default=False, doc=ABANDON)
    status = param.String(default="", doc="What the probe is doing, did, or why it was refused (Markdown)")
    report = param.ClassSelector(class_=ProbeReport, default=None, doc="The last probe's report")
    running = param.Boolean(default=False, doc="A probe is publishing")
    may = refusals()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        cannot = self.may(RunProbe)
        self._start = pn.widgets.Button(label="Publish probe", button_type="primary",
                                        disabled=True if cannot else self.param.running)
        if cannot:
            self.status = permitted([], cannot)
        self._start.on_click(self._on_start)
        # A lone Checkbox has no accessible name: a group of one names it.
        abandon = pn.widgets.CheckBoxGroup(options=[ABANDON], value=[ABANDON] if self.abandon else [])
        abandon.param.watch(lambda e: setattr(self, "abandon", ABANDON in e.new), "value")
        form = pn.Column(
            pn.widgets.RadioButtonGroup.from_param(self.param.kind),
            pn.widgets.TextInput.from_param(self.param.stream, name=self.param.stream.doc),
            pn.widgets.TextInput.from_param(self.param.subject, name="subject"),
            *(pn.widgets.IntInput.from_param(p, name=p.doc) for p in (self.param.count, self.param.batch_size,
                                                                       self.param.flow)),
            pn.widgets.Select.from_param(self.param.gap_mode, name=self.param.gap_mode.doc),
            pn.widgets.IntInput.from_param(self.param.skip_seq, name=self.param.skip_seq.doc),
            abandon, self._start, width=360)
        self._layout = pn.Column(pn.pane.Markdown("## Probe"),
                                 pn.Row(form, pn.pane.Markdown(self.param.status, sizing_mode="stretch_width"),
                                        sizing_mode="stretch_width"),
                                 sizing_mode="stretch_width")

    def options(self) -> ProbeOptions:
        """The probe the form describes; ConsoleError or ValueError for one that is not valid."""
        return ProbeOptions(kind=self.kind, stream=self.stream.strip(), subject=self.subject.strip(), count=self.count,
                            batch_size=self.batch_size, flow=self.flow, gap_mode=GapMode(self.gap_mode),
                            skip_seq=self.skip_seq or None, abandon=self.abandon)

    async def start(self) -> ProbeReport | None:
        """Publishes the probe the params describe (a notebook calls it; the button does)."""
        try:
            options = self.options()
        except (ValueError, ConsoleError) as e:
            self.status = f"**Not a valid probe:** {html.escape(str(e))}"
            return None
        self.running, self.status = True, "Publishing…"

        def progress(sent: int) -> None:
            self.status = f"Publishing… {sent} of {options.count} sent"

        try:
            self.report = await self.run(options, progress)
        except ConsoleError as e:
            self.status = f"**Refused:** {html.escape(str(e))}"
            return None
        finally:
            self.running = False
        self.status = report_markdown(self.report)
        report: ProbeReport | None = self.report
        return report

    async def _on_start(self, *_: Any) -> None:
        await self.start()

    async def reload(self) -> None:
        """A form: nothing to read."""

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
