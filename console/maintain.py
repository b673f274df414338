"""`batch-console maintain`: plan a node's maintenance (what taking it out would do, changing nothing),
drain it (every leadership off it, batch-safely, under the lease; an audited admin's action), restart it
around the operator's own command, or restart every node in turn (`rolling`)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, TYPE_CHECKING

from console.config import Settings
from console.domain.audit import CLI
from console.domain.maintenance import BACK_TIMEOUT, MOVE_TIMEOUT, REFUSED, RUN_TIMEOUT, node_name, plan_text
from console.errors import ConfigError
from console.runtime import Runtime

if TYPE_CHECKING:
    from console.actions import Actions
    from console.broker.evacuate import Evacuated
    from console.broker.maintenance import Move
    from console.domain.ledger_verdict import LedgerVerdict
    from console.domain.maintenance import Plan, Restart


def add_arguments(maintain: argparse.ArgumentParser) -> None:
    """`maintain`'s own arguments (its settings are the CLI's to add)."""
    maintain.add_argument("step", choices=["plan", "drain", "restart", "rolling"])
    maintain.add_argument("node", type=_node, nargs="?",
                          help="the server's name (server_name in its configuration); rolling takes every one")
    maintain.add_argument("--run", metavar="COMMAND", default=None,
                          help="restart and rolling: the command that restarts a node ({node} is its name, also in "
                               "BATCH_CONSOLE_NODE), run by the shell; e.g. 'systemctl restart nats' or "
                               "'kubectl delete pod {node}'")
    maintain.add_argument("--run-timeout", type=_seconds(1.0, 3600), default=RUN_TIMEOUT,
                          help="seconds the command may take before it is killed (default 300)")
    maintain.add_argument("--back-timeout", type=_seconds(1.0, 3600), default=BACK_TIMEOUT,
                          help="seconds a node may take, after the command, to be current in every group (default 300)")
    maintain.add_argument("--evacuate", action="store_true",
                          help="plan and drain: also move the node's replicas to other servers (nats-server 2.15), "
                               "each stream's move cancelled if it has not ended within --move-timeout")
    maintain.add_argument("--move-timeout", type=_seconds(1.0, 3600), default=MOVE_TIMEOUT,
                          help="seconds a stream's evacuation may take before it is cancelled (default 120)")
    maintain.add_argument("--format", choices=["text", "json"], default="text")
    maintain.add_argument("--watch", type=_seconds(0.0, 600), default=None,
                          help="seconds `plan` watches the streams it leads for open batches (default: the batch "
                               "timeout, within which every open batch sends a message or is abandoned)")
    maintain.add_argument("--time-box", type=_seconds(0.0, 600), default=None,
                          help="seconds a drain waits, on each stream, for no batch to be open (default: the "
                               "batch timeout); a batch still open then is named before the step")


def _node(text: str) -> str:
    from console.domain.maintenance import NotANode

    try:
        return node_name(text)
    except NotANode as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{low:g} to {high:g} seconds")
        return value
    return parse


async def run_maintain(settings: Settings, args: argparse.Namespace) -> int:
    from console.broker.maintenance import MaintenanceRefused, make_plan
    from console.commands import DrainNode

    if settings.systems():
        raise ConfigError("maintain works on one system: give its --server (a systems file names several)")
    if (args.node is None) != (args.step == "rolling"):
        raise ConfigError("rolling takes every node, in turn: give no NODE" if args.node else
                          f"maintain {args.step} needs the NODE to work on")
    if args.evacuate and args.step not in ("plan", "drain"):
        raise ConfigError("--evacuate is for plan and drain: a restarted node keeps its replicas")
    if (args.run is None) == (args.step in ("restart", "rolling")):
        raise ConfigError(f"maintain {args.step} needs --run COMMAND, the command that restarts a node" if args.run is None
                          else "--run is for restart and rolling")
    timeout = settings.collector.batch_timeout_or_default
    if args.step in ("restart", "rolling"):
        return await _restart(settings, args, timeout)
    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout) as runtime:
        watch = timeout if args.watch is None else args.watch
        # a drain watches the streams itself, for a batch timeout, before its first step
        plan = await make_plan(runtime.nc, args.node, runtime.system_nc, timeout, watch if args.step == "plan" else 0,
                               evacuate=args.evacuate)
        if args.step == "plan":
            print(json.dumps(plan.to_dict()) if args.format == "json" else plan_text(plan))
            return 1 if plan.verdict == REFUSED else 0
        print(plan_text(plan), file=sys.stderr)
        if plan.verdict == REFUSED:
            print(f"batch-console: maintain drain {args.node} refused: nothing moved", file=sys.stderr)
            return 1
        time_box = timeout if args.time_box is None else args.time_box
        try:
            drained = DrainNode(plan, time_box, timeout, lambda line: print(line, file=sys.stderr, flush=True),
                                _ledger(runtime, settings, timeout), move_timeout=args.move_timeout)
            moves = await runtime.actions(CLI).run(drained)
        except MaintenanceRefused as e:
            print(f"batch-console: maintain drain {args.node} refused: {e}", file=sys.stderr)
            return 1
        if args.format == "json":
            print(json.dumps({"moves": [m.to_dict() for m in moves],
                              "evacuated": [e.to_dict() for e in drained.evacuated] if plan.evacuate else None,
                              "ledger": drained.verdict.to_dict() if drained.verdict else None}))
        return 0 if all(m.error is None for m in moves) and all(e.error is None for e in drained.evacuated) else 1


async def _restart(settings: Settings, args: argparse.Namespace, timeout: float) -> int:
    from console.broker.maintenance import MaintenanceRefused, read_meta, server_names
    from console.domain.maintenance import rolling_order
    from console.commands import RestartNodes

    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout) as runtime:
        servers = await server_names(runtime.nc, runtime.system_nc)
        meta_leader, _ = await read_meta(runtime.system_nc)
        nodes = [args.node] if args.step == "restart" else rolling_order(tuple(servers), meta_leader)
        if args.step == "rolling" and meta_leader is None:
            print("batch-console: the meta leader is not known (no system account): the nodes go in name order",
                  file=sys.stderr)
        time_box = timeout if args.time_box is None else args.time_box
        try:
            restarts = RestartNodes(nodes, args.run, time_box, timeout, args.run_timeout, args.back_timeout,
                                    list(settings.connection.servers), len(servers),
                                    lambda line: print(line, file=sys.stderr, flush=True), _ledger(runtime, settings, timeout))
            done = await runtime.actions(CLI).run(restarts)
        except MaintenanceRefused as e:
            print(f"batch-console: maintain {args.step} refused: {e}", file=sys.stderr)
            return 1
        if args.format == "json":
            print(json.dumps({"restarts": [r.to_dict() for r in done],
                              "ledger": restarts.verdict.to_dict() if restarts.verdict else None}))
        else:
            from console.domain.maintenance import restart_line

            print("\n".join([*(restart_line(r) for r in done), *([restarts.verdict.text()] if restarts.verdict else [])]))
        return 0 if len(done) == len(nodes) and all(r.error is None for r in done) else 1



def _ledger(runtime: Runtime, settings: Settings, batch_timeout: float,
            said: Callable[[str], None] | None = None) -> Any:
    """The loss ledger's reader, or None (said) without the event key that reads it."""
    from console.broker.maintenance_ledger import LedgerReader

    ledger, why = LedgerReader.over(runtime.nc, lambda: runtime.event_log, batch_timeout,
                                    settings.collector.status_every)
    if why:
        (said or (lambda line: print(f"batch-console: {line}", file=sys.stderr)))(
            f"the loss ledger is not read afterwards: {why}")
    return ledger


@dataclass
class MaintenanceDone:
    """What a drain or a restart did, as every face shows it: its steps (moves or restarts), the loss
    ledger's verdict (None: not read), and a drain's evacuations."""

    steps: list[Move] | list[Restart]
    verdict: LedgerVerdict | None
    evacuated: list[Evacuated] = field(default_factory=list)


async def maintenance_plan(runtime: Runtime, node: str, watch: float | None = None, evacuate: bool = False) -> Plan:
    """What taking the server `node` out would do, changing nothing (console.broker.maintenance): its groups
    read now, the streams it leads watched `watch` seconds for open batches (default: one batch timeout);
    `evacuate`: its replicas to move too."""
    from console.broker.maintenance import make_plan

    timeout = runtime.settings.collector.batch_timeout_or_default
    return await make_plan(runtime.nc, node_name(node), runtime.system_nc, timeout,
                           timeout if watch is None else watch, evacuate)


async def drain_node(runtime: Runtime, actions: Actions, node: str, progress: Callable[[str], None],
                     evacuate: bool = False) -> MaintenanceDone:
    """The action maintain.drain as the page and the API run it: the node's groups read again at the
    moment asked (a plan can be minutes old), the time box the batch timeout; `evacuate`: its replicas too."""
    from console.commands import DrainNode
    from console.domain.maintenance import Plan  # noqa: F811 (at run time: the refusal's empty plan)

    timeout = runtime.settings.collector.batch_timeout_or_default
    if actions.allowed(DrainNode) is not None:  # refused before anything is read: said and audited at once
        await actions.run(DrainNode(Plan(node_name(node), (), (), 0, None, (), 0.0, (), (), ()), 0.0, timeout))
    command = DrainNode(await maintenance_plan(runtime, node, 0, evacuate), timeout, timeout, progress,
                        _ledger(runtime, runtime.settings, timeout, progress))
    moves = await actions.run(command)
    return MaintenanceDone(moves, command.verdict, command.evacuated)


async def restart_node(runtime: Runtime, actions: Actions, node: str,
                       progress: Callable[[str], None]) -> MaintenanceDone:
    """The action maintain.restart as the page and the API run it, with the command the console was started
    with (--restart-command), never one given by a browser or a caller: ConfigError without one."""
    from console.broker.maintenance import server_names
    from console.commands import RestartNodes

    command = runtime.settings.web.restart_command
    if not command:
        raise ConfigError("the console was started without --restart-command: it restarts no node")
    timeout = runtime.settings.collector.batch_timeout_or_default
    if actions.allowed(RestartNodes) is not None:  # refused before anything is read: said and audited at once
        await actions.run(RestartNodes([node_name(node)], command, timeout, timeout, RUN_TIMEOUT, BACK_TIMEOUT, [], 0))
    servers = await server_names(runtime.nc, runtime.system_nc)
    restarts = RestartNodes([node_name(node)], command, timeout, timeout, RUN_TIMEOUT, BACK_TIMEOUT,
                            list(runtime.settings.connection.servers), len(servers), progress,
                            _ledger(runtime, runtime.settings, timeout, progress))
    done = await actions.run(restarts)
    return MaintenanceDone(done, restarts.verdict)
