"""The Alerts page: the rules with their state, the alerts firing now, what was sent and every
delivery attempt (failed ones in red, with the receiver's answer); add, edit and mute a rule,
except in read-only mode. The alerts process reloads the rules file when it changes."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
import panel as pn
import param

from console.commands import MuteAlertRule, SaveAlertRule, UnmuteAlertRule
from console.domain.alert_rules import RulesError, rule_toml, without_targets
from console.domain.toml_text import duration_text
from console.domain.display import Clock
from console.errors import ConsoleError
from console.ui.controls import keep_choice, permitted
from console.ui.formatting import Clocked, put, tabulator
from console.ui.history import stream_cell

EXAMPLE = '''[[rule]]
name = "orders abandoned"
when = "lost_batches"
streams = ["ORDERS*"]
at_least = 1
within = "5m"
severity = "critical"
# notify = ["webhook:https://hooks.example.com/batches"]  (hosts allowed by --webhook-hosts)
'''


def deliveries_frame(deliveries: list[dict[str, Any]], clock: Clock = Clock(), several: bool = False) -> pd.DataFrame:
    """Newest first; a failed attempt's row says so in red (escaped: the answer comes from the receiver).
    several: several systems' deliveries, each with its system."""
    rows = []
    for d in deliveries[:200]:
        answer = html.escape(str(d.get("answer", "")))
        rows.append({"time": clock.when(d.get("time")), "system": d.get("system", ""), "rule": d.get("rule", ""),
                     "stream": stream_cell(d.get("stream", ""), system=d.get("system") if several else None),
                     "status": d.get("status", ""), "target": d.get("target", ""),
                     "result": answer if d.get("ok") else f'<span style="color:#c92a2a;font-weight:600">failed: {answer}</span>'})
    return pd.DataFrame(rows, columns=["time", *(["system"] if several else []), "rule", "stream", "status", "target",
                                       "result"])


class AlertsPage(Clocked, pn.viewable.Viewer):
    view = param.Parameter(doc="The rules and the alerts as the user sees them (console.queries.alerts.SeenAlerts)",
                           precedence=-1)
    read_only = param.Boolean(default=False, doc="Show, never change")
    actions = param.Parameter(default=None, precedence=-1,
                              doc="What this page's user may do (console.actions.Actions); None: the view's own")
    rule: param.Selector[str] = param.Selector(default="", objects=[""], check_on_set=False,
                                               doc="The rule muted, unmuted or edited")
    rule_text = param.String(default=EXAMPLE, doc="One [[rule]] table: added, or replacing the rule of its name")
    result = param.String(default="", doc="What the last change did, or why it was refused")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        keep_choice(self, "rule")
        table = dict(disabled=True, show_index=False, sizing_mode="stretch_width")
        self._problem = pn.pane.Markdown("")
        self._rules = tabulator(pd.DataFrame(), height=260, **table)
        # as tall as its rows, a page of a dozen at most: a height set with each change could draw no row at all
        self._firing = tabulator(pd.DataFrame(), pagination="local", page_size=12, **table)
        self._sent = tabulator(pd.DataFrame(), height=200, formatters={"text": {"type": "textarea"}},
                                          widths={"text": 480}, **table)
        self._deliveries = tabulator(pd.DataFrame(), height=240, formatters={"result": {"type": "html"}},
                                                **table)
        w = pn.widgets
        controls = []
        if not self.read_only:
            mute, unmute, save = (w.Button(label="Mute"), w.Button(label="Unmute"),
                                  w.Button(label="Save rule", button_type="primary"))
            whys = [self.actions.allowed(command) for command in (MuteAlertRule, UnmuteAlertRule, SaveAlertRule)] \
                if self.actions is not None else [None] * 3
            cannot = [permitted([button], why) for button, why in zip((mute, unmute, save), whys)]
            mute.on_click(self._on_mute)
            unmute.on_click(self._on_unmute)
            save.on_click(self._on_save)
            controls = [pn.pane.Markdown("### Change a rule"), w.Select.from_param(self.param.rule, name="rule"),
                        pn.Row(mute, unmute), w.TextAreaInput.from_param(self.param.rule_text, name="rule (TOML)",
                                                                          height=220),
                        save, pn.pane.Markdown("\n\n".join(dict.fromkeys(c for c in cannot if c))),
                        pn.pane.Markdown(self.param.result)]
        self._layout = pn.Column(
            pn.pane.Markdown("## Alerts"), self._problem, pn.pane.Markdown("### Firing now"), self._firing,
            pn.Row(pn.Column(pn.pane.Markdown("### Rules"),
                             pn.pane.Markdown("Each rule's name, state and severity first; its conditions and targets "
                                              "to the right: the table scrolls sideways beside the editor."),
                             self._rules, sizing_mode="stretch_width"),
                   pn.Column(*controls, width=420) if controls else pn.Spacer(width=0), sizing_mode="stretch_width"),
            pn.pane.Markdown("### Sent"), self._sent, pn.pane.Markdown("### Deliveries"), self._deliveries,
            sizing_mode="stretch_width")

    refresh_every_ms = 2000  # what fires, what was sent

    async def reload(self) -> None:
        self.read()

    def refresh(self) -> None:
        self.read()

    def read(self) -> None:
        """The rules file and the alerts process's SQLite (local and quick: in the web's first answer)."""
        rules, problem = self.view.rules()
        firing = self.view.firing()
        firing_rules = {f[0] for f in firing}
        note = without_targets(rules)
        self._problem.object = (f"**Rules file refused, the old rules stay:** {html.escape(problem)}" if problem
                                else f"**Nothing is sent.** {html.escape(note, quote=False)}" if note else "")
        put(self._rules, pd.DataFrame([  # what an operator decides on first: in view at 1280 px beside the editor
            {"rule": r.name, "state": "muted" if r.muted else "FIRING" if r.name in firing_rules else "ok",
             "severity": r.severity, "within": duration_text(r.within), "at least": r.at_least, "when": r.when,
             "streams": ", ".join(r.streams) or "all", "reasons": ", ".join(r.reasons) or "all",
             "notify": ", ".join(r.notify) or "(none)"} for r in rules]))
        several = getattr(self.view, "several", False)  # several systems' alerts: each row with its system
        system = ["system"] if several else []
        put(self._firing, pd.DataFrame([(*f[3:], f[0], stream_cell(f[1], system=f[3] if several else None),
                                         self.clock.when(f[2])) for f in firing],
                                       columns=[*system, "rule", "stream", "since"]))
        sent = [{**{k: n.get(k) for k in ("rule", "status", "count", "text", "system")},
                 "stream": stream_cell(n.get("stream"), system=n.get("system") if several else None),
                 "time": self.clock.when(n["time"])} for n in self.view.notices()[:200]]
        put(self._sent, pd.DataFrame(sent, columns=["time", *system, "rule", "status", "stream", "count", "text"]))
        put(self._deliveries, deliveries_frame(self.view.deliveries(), self.clock, several))
        names = [r.name for r in rules]
        if names != self.param.rule.objects:
            self.param.rule.objects = names
        if self.rule not in names and names:
            self.rule = names[0]
        elif self.rule in names and self.rule_text == EXAMPLE:  # a rule from the URL: its text, not the example
            self._on_rule()

    @param.depends("rule", watch=True)
    def _on_rule(self) -> None:
        rules, _ = self.view.rules()
        chosen = next((r for r in rules if r.name == self.rule), None)
        if chosen is not None:
            self.rule_text = rule_toml(chosen)

    async def _on_mute(self, _event: Any) -> None:
        await self.set_muted(True)

    async def _on_unmute(self, _event: Any) -> None:
        await self.set_muted(False)

    async def _on_save(self, _event: Any) -> None:
        await self.save()

    async def set_muted(self, muted: bool) -> None:
        try:
            await self.view.set_muted(self.rule, muted, self.actions)
        except ConsoleError as e:  # read-only: refused (and audited) by the action, whoever sent the click
            self.result = f"**Refused:** {html.escape(str(e))}"
            return
        self.result = (f"{html.escape(self.rule)} {'muted' if muted else 'unmuted'}. The alerts process takes it "
                       "within seconds.")
        self.read()
        self._on_rule()  # the editor shows the rule as it now is

    async def save(self) -> None:
        try:
            name = await self.view.save_rule(self.rule_text, self.actions)
        except (RulesError, ConsoleError) as e:
            self.result = f"**Refused:** {html.escape(str(e))}"
            return
        self.result = f"Saved {html.escape(name)}; the alerts process reloads it."
        self.read()

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout
