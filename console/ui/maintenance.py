"""The Maintenance page: pick a node, see what taking it out would do (the leaderships it holds, the
groups that would lose quorum, the batches open on its streams, a verdict), then drain it: every
leadership moved off it between batches, as the action maintain.drain (audited; an admin's), its
progress line by line and what it moved; or restart it around the command the console was started with
(--restart-command: never one typed in the browser), as the action maintain.restart."""

from __future__ import annotations

import html
from typing import Any, TYPE_CHECKING

import pandas as pd
import panel as pn
import param

from console.commands import DrainNode, RestartNodes
from console.domain.maintenance import REFUSED, NotANode, Plan, node_name, restart_line
from console.ui.controls import permitted, refusals
from console.ui.formatting import Clocked, coroutine, tabulator

if TYPE_CHECKING:
    from console.broker.maintenance import Move
    from console.domain.ledger_verdict import LedgerVerdict
    from console.domain.maintenance import Restart

LEADS = ["group", "kind", "replicas"]
MOVES = ["group", "moved to", "waited s", "publishers held", "open at the step", "error"]


class MaintenancePage(Clocked, pn.viewable.Viewer):
    nodes = coroutine("async () -> the servers of this system, by name")
    plan_for = coroutine("async (node, evacuate) -> Plan: what taking it out would do, changing nothing")
    drain = coroutine("async (plan, progress) -> MaintenanceDone: the action maintain.drain (and the plan's "
                      "evacuation)", default=None)
    restart = coroutine("async (node, progress) -> MaintenanceDone: the action maintain.restart (with the command "
                        "the console was started with)", default=None)
    read_only = param.Boolean(default=False, doc="No control that changes the server is drawn")
    may = refusals()
    node = param.String(default="", doc="The server to plan for (server_name)")
    plan = param.Parameter(default=None, doc="The last plan made on this page")
    state = param.String(default="Pick a server and make its plan: nothing moves until you drain it.")
    status = param.String(default="", doc="The drain's progress, or why it was refused")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._node = pn.widgets.Select(name="server", options=[self.node] if self.node else [], width=200)
        self._make = pn.widgets.Button(label="Plan", button_type="primary", width=120)
        self._evacuate = pn.widgets.Checkbox(name="also move its replicas to other servers (evacuate, nats-server 2.15)",
                                             value=False, width=420)
        self._make.on_click(self._on_plan)
        self._leads = tabulator(pd.DataFrame(columns=LEADS))
        self._moves = tabulator(pd.DataFrame(columns=MOVES), widths={"error": 320, "open at the step": 260})
        self._plan_text = pn.pane.Markdown("")
        controls: list[Any] = [pn.Row(self._node, self._make, self._evacuate)]
        self._drain = self._restart = None
        if not self.read_only and self.drain is not None:  # in read-only mode not even in the document
            self._drain = pn.widgets.Button(label="Drain", button_type="danger", width=200, disabled=True)
            self._drain.on_click(self._on_drain)
            self.status = permitted([self._drain], self.may(DrainNode))
            self._restart = pn.widgets.Button(label="Restart", button_type="danger", width=200, disabled=True,
                                              visible=self.restart is not None)
            self._restart.on_click(self._on_restart)
            controls.append(pn.Row(self._drain, self._restart,
                                   pn.pane.Markdown(self.param.status, sizing_mode="stretch_width"),
                                   sizing_mode="stretch_width"))
            if self.restart is None:
                controls.append(pn.pane.Markdown("To restart a node from here, start the console with "
                                                 "`--restart-command` (the command that restarts one; `{node}` is its "
                                                 "name): drained first, then waited for until it is back."))
        self._layout = pn.Column(pn.pane.Markdown("## Maintenance"), pn.pane.Markdown(self.param.state), *controls,
                                 self._plan_text, self._leads, pn.pane.Markdown("### Moved"), self._moves,
                                 sizing_mode="stretch_width")

    @param.depends("node", watch=True)
    def _only_a_name(self) -> None:
        """The URL's `node` reaches the page past the checks of the first answer (the location kept in step):
        one that is not a server's name is dropped here."""
        try:
            node_name(self.node)
        except NotANode:
            if self.node:
                self.node = ""

    async def reload(self) -> None:
        try:
            found = await self.nodes()
        except Exception as e:  # the server away: said, read again on the next reload
            self.state = f"The servers were not read: {html.escape(str(e)[:300] or type(e).__name__)}"
            return
        self._node.options = sorted(set(found) | ({self.node} if self.node else set()))
        if self.node and self.plan is None:
            self._node.value = self.node
            await self.make_plan()

    async def refresh(self) -> None:
        return None  # a plan is made when asked: the page does not move under the operator's eyes

    async def make_plan(self) -> Plan | None:
        node = self._node.value or self.node
        if not node:
            self.state = "Pick a server first."
            return None
        self.node, self.state = node, f"Reading {html.escape(node)}'s groups and watching its streams for open batches…"
        try:
            plan: Plan = await self.plan_for(node, self._evacuate.value)
        except Exception as e:  # a name that is not one, the server away
            self.state = f"**No plan:** {html.escape(str(e)[:300] or type(e).__name__)}"
            return None
        self.plan = plan
        self._show(plan)
        self._moves.value = pd.DataFrame(columns=MOVES)  # the last drain's moves are not this plan's
        return plan

    def _show(self, plan: Plan) -> None:
        said = [*(f"- refused: {html.escape(r)}" for r in plan.refusals), *(f"- waits for: {html.escape(w)}"
                                                                            for w in plan.waits),
                *(f"- {html.escape(n)}" for n in plan.notes)]
        self.state = (f"**{html.escape(plan.node)}: {plan.verdict.upper()}** — leads {len(plan.leads)} group(s), holds a "
                      f"replica in {plan.member_of} group(s); {len(plan.open_batches)} batch(es) open on its streams "
                      f"(watched {plan.watched:g} s); meta leader {html.escape(plan.meta_leader or 'not known')}")
        self._plan_text.object = "\n".join(said)
        self._leads.value = pd.DataFrame([{"group": g.name, "kind": "stream" if g.consumer is None else "consumer",
                                           "replicas": g.replicas} for g in plan.leads], columns=LEADS, dtype=object)
        if self._drain is not None:
            self._drain.label = f"Drain {plan.node}"
            why = self.may(DrainNode)
            self.status = permitted([self._drain], why) if why else (
                "Refused by the plan: nothing can be moved" if plan.verdict == REFUSED else
                "Drain moves every leadership off it, each stream's between batches; it keeps serving.")
            self._drain.disabled = why is not None or plan.verdict == REFUSED
        if self._restart is not None:
            self._restart.label = f"Restart {plan.node}"
            self._restart.disabled = self.may(RestartNodes) is not None or plan.verdict == REFUSED

    async def run_drain(self) -> list[Move] | None:
        """The action maintain.drain on the last plan (the button; a notebook calls it)."""
        plan = self.plan
        if plan is None or self.drain is None:
            self.status = "Make a plan first."
            return None
        def progress(line: str) -> None:
            self.status = html.escape(line[:300])

        self.status = self._refused_now(DrainNode, "drained") or f"Draining {html.escape(plan.node)}…"
        try:
            done = await self.drain(plan, progress)
        except Exception as e:  # refused (role, read-only, lease, plan), the server away: said here
            self.status = f"**Not drained:** {html.escape(str(e)[:300] or type(e).__name__)}"
            return None
        moves: list[Move] = done.steps
        self._moves.value = pd.DataFrame(
            [{"group": m.group, "moved to": m.new_leader or "", "waited s": round(m.waited, 2),
              "publishers held": m.followers,
              "open at the step": ", ".join(f"{b.kind} {b.batch_id}" for b in m.at_risk), "error": m.error or ""}
             for m in moves] +
            [{"group": f"{e.stream} (its replica)", "moved to": ", ".join(e.replicas), "waited s": round(e.seconds, 2),
              "publishers held": e.followers,
              "open at the step": ", ".join(f"{b.kind} {b.batch_id}" for b in e.at_risk), "error": e.error or ""}
             for e in done.evacuated], columns=MOVES, dtype=object)
        failed = [m for m in moves if m.error is not None]
        risk = sum(len(m.at_risk) for m in moves) + sum(len(e.at_risk) for e in done.evacuated)
        stayed = [e for e in done.evacuated if e.error is not None]
        self.status = (f"{html.escape(plan.node)} drained: moved {len(moves) - len(failed)} of {len(moves)} "
                       f"leadership(s)" + (f", **{len(failed)} not moved**" if failed else "")
                       + (f"; {len(done.evacuated) - len(stayed)} of {len(done.evacuated)} replica(s) evacuated"
                          if plan.evacuate is not None else "") + (f", **{len(stayed)} not**" if stayed else "")
                       + (f"; **{risk} batch(es) were open at a step**" if risk else "; no batch was open at a step")
                       + _ledger_said(done.verdict))
        return moves

    async def run_restart(self) -> list[Restart] | None:
        """The action maintain.restart on the last plan's node (the button; a notebook calls it)."""
        plan = self.plan
        if plan is None or self.restart is None:
            self.status = "Make a plan first." if self.restart else "This console was started without --restart-command."
            return None

        def progress(line: str) -> None:
            self.status = html.escape(line[:300])

        self.status = self._refused_now(RestartNodes, "restarted") or \
            f"Restarting {html.escape(plan.node)}: its drain first…"
        try:
            done = await self.restart(plan.node, progress)
        except Exception as e:  # refused (role, read-only, lease), the server away: said here
            self.status = f"**Not restarted:** {html.escape(str(e)[:300] or type(e).__name__)}"
            return None
        restarts: list[Restart] = done.steps
        self.status = ("; ".join(html.escape(restart_line(r)) for r in restarts) or "Nothing restarted.") + \
            _ledger_said(done.verdict)
        return restarts

    def _refused_now(self, command: type[DrainNode] | type[RestartNodes], done: str) -> str | None:
        """A role's refusal said at once, as the action says it (the action then records it in the audit trail,
        which a loaded server can take a while to take)."""
        why = self.may(command)
        return f"**Not {done}:** {html.escape(f'{command.name} is refused: {why}'[:300])}" if why else None

    async def _on_restart(self, *_: Any) -> None:
        await self.run_restart()

    async def _on_plan(self, *_: Any) -> None:
        await self.make_plan()

    async def _on_drain(self, *_: Any) -> None:
        await self.run_drain()

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


def _ledger_said(verdict: LedgerVerdict | None) -> str:
    """The loss ledger's verdict for the status line ('' where it was not read)."""
    return f"; {html.escape(verdict.text()[:400])}" if verdict else ""
