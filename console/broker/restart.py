"""A node restarted around the operator's own command, and every node in turn: drained first (every
leadership off it, batch-safely), the command run (the console never holds the operator's SSH or cloud
keys: `systemctl restart nats`, `kubectl delete pod nats-1`, a script), then the node waited for until
it is back: a new server id on its client port, current in every group it holds a replica of. Only then
is the next node taken (`rolling`: followers first, the meta leader last), and a node that is not safe
or not back stops the round."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import time
from collections import deque
from typing import Callable
from urllib.parse import urlparse

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker.maintenance import drain, make_plan, read_group, read_groups, read_meta
from console.domain.maintenance import REFUSED, Group, Plan, Restart, plan_text, restart_line

MAX_INFO = 64 * 1024  # bytes of a server's INFO line read at most
LOOK_EVERY = 0.25  # seconds between looks at the node's groups while it restarts
OUTPUT_KEPT = 20  # lines of the command's output kept for the result
NODE_ENV = "BATCH_CONSOLE_NODE"


async def server_info(url: str, timeout: float = 2.0) -> dict[str, object] | None:
    """The INFO a server sends before any authentication, read from its client port: None when nothing
    answers, or what answers is not a server's INFO (at most MAX_INFO bytes read)."""
    where = urlparse(url if "://" in url else f"nats://{url}")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(where.hostname, where.port or 4222,
                                                                        limit=MAX_INFO), timeout)
    except (OSError, asyncio.TimeoutError, ValueError):
        return None
    try:
        line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return None
    finally:
        writer.close()
    if not line.startswith(b"INFO "):
        return None
    try:
        info = json.loads(line[5:])
    except (ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


async def client_url_of(nc: Client, node: str, given: list[str]) -> tuple[str, str] | None:
    """The node's client URL and its server id now: among the URLs given and those the cluster
    advertises, the one whose INFO names the node."""
    candidates = list(dict.fromkeys([*given, *(s.geturl() for s in nc.servers)]))
    for url in candidates:
        info = await server_info(url)
        if info and info.get("server_name") == node and isinstance(info.get("server_id"), str):
            return url, str(info["server_id"])
    return None


async def member_groups(nc: Client, node: str) -> list[Group]:
    return [g for g in await read_groups(nc) if node in g.members()]


async def _look(nc: Client, node: str, groups: list[Group]) -> bool:
    """Whether the node is current in every one of `groups`, as their leaders report it now."""
    for g in groups:
        try:
            now = await read_group(nc, g)
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
            return False  # no leader to answer: the group is electing, the node not back in it yet
        if (now.leader or now.peers) and not now.current(node):  # (neither: a server outside any cluster, up)
            return False
    return True


async def run_command(command: str, node: str, timeout: float, said: Callable[[str], None]) -> tuple[int | None, tuple[str, ...]]:
    """The operator's command with `{node}` replaced by the node's name (quoted for the shell), and the
    name in BATCH_CONSOLE_NODE; the console's own settings and secrets are not passed on. Its exit
    code (None: killed after `timeout` s) and its last lines of output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCH_CONSOLE_")} | {NODE_ENV: node}
    proc = await asyncio.create_subprocess_shell(command.replace("{node}", shlex.quote(node)), env=env,
                                                 stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    kept: deque[str] = deque(maxlen=OUTPUT_KEPT)

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()[:300]
            line = "".join(c if c.isprintable() else "?" for c in line)
            kept.append(line)
            said(f"  | {line}")

    try:
        await asyncio.wait_for(asyncio.gather(read(), proc.wait()), timeout)
    except asyncio.TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        return None, tuple(kept)
    return proc.returncode, tuple(kept)


async def restart_node(nc: Client, plan_: Plan, command: str, *, time_box: float, batch_timeout: float,
                       run_timeout: float, back_timeout: float, urls: list[str], system_nc: Client | None = None,
                       said: Callable[[str], None] = lambda _: None) -> Restart:
    """Drain the node (and hand the meta leadership on, given the system account), run the command, wait
    until the node is back. The plan is the node's, just made."""
    node = plan_.node
    groups = await member_groups(nc, node)
    found = await client_url_of(nc, node, urls)
    if found is None:
        said(f"{node}'s client port is not among the URLs known: its restart is judged from its groups alone")
    moves = await drain(nc, node, plan_, time_box, batch_timeout, said=said)
    moved = sum(1 for m in moves if m.error is None)
    if moved < len(moves):
        return Restart(node, moved, None, (), False, None, None, "its drain did not move every leadership: not run")
    if plan_.meta_leader == node and system_nc is not None and not await _meta_moved(system_nc, node):
        return Restart(node, moved, None, (), False, None, None, "the meta leadership did not move off it: not run")
    said(f"{node}: running the restart command")
    started = time.monotonic()
    seen_down = False

    async def watch() -> None:
        nonlocal seen_down
        while not seen_down:
            seen_down = not await _look(nc, node, groups) or (found is not None and await _new_id(found))
            await asyncio.sleep(LOOK_EVERY)

    watcher = asyncio.create_task(watch())
    try:
        code, output = await run_command(command, node, run_timeout, said)
    finally:
        watcher.cancel()
    if code is None:
        return Restart(node, moved, None, output, seen_down, None, None,
                       f"the command did not finish within {run_timeout:g} s: killed; the node's state is not known")
    if code != 0:
        return Restart(node, moved, code, output, seen_down, None, None, f"the command failed with exit code {code}")
    deadline = started + run_timeout + back_timeout
    # a command can return before the node goes down (a pod deleted without waiting): it is given a while
    down_by = time.monotonic() + min(back_timeout, 30.0)
    while time.monotonic() < deadline:
        new_id = None if found is None else await _new_id(found)
        seen_down = seen_down or bool(new_id)
        if await _look(nc, node, groups) and (new_id or (found is None and seen_down)):
            return Restart(node, moved, code, output, seen_down, new_id, time.monotonic() - started)
        if not seen_down and time.monotonic() > down_by:
            return Restart(node, moved, code, output, False, False if found else None, None,
                           "the command succeeded but the node did not restart (the same server id, never down)")
        await asyncio.sleep(LOOK_EVERY)
    return Restart(node, moved, code, output, seen_down, None, None,
                   f"not back within {back_timeout:g} s: not current in every group it holds a replica of")


async def _meta_moved(system_nc: Client, node: str) -> bool:
    try:
        await system_nc.request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=5)
    except (nats.errors.Error, asyncio.TimeoutError):
        pass  # asked again below by reading who leads
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        leader, _ = await read_meta(system_nc)
        if leader and leader != node:
            return True
        await asyncio.sleep(0.2)
    return False


async def _new_id(found: tuple[str, str]) -> bool:
    url, before = found
    info = await server_info(url)
    now = info.get("server_id") if info else None
    return isinstance(now, str) and now != before


async def rolling(nc: Client, system_nc: Client | None, nodes: list[str], command: str, *, time_box: float,
                  batch_timeout: float, run_timeout: float, back_timeout: float, urls: list[str],
                  said: Callable[[str], None] = lambda _: None) -> list[Restart]:
    """Each node in turn, each planned afresh once the one before is back; the first refused plan or
    restart that is not safe stops the round (the last Restart says why)."""
    done: list[Restart] = []
    for node in nodes:
        plan_ = await make_plan(nc, node, system_nc, batch_timeout, 0)
        # a node just back leaves groups catching up a while: the next plan waits for them, time-boxed
        deadline = time.monotonic() + back_timeout
        while done and plan_.verdict == REFUSED and time.monotonic() < deadline:
            said(f"{node}: waiting for the cluster to be whole again: {'; '.join(plan_.refusals)[:300]}")
            await asyncio.sleep(2.0)
            plan_ = await make_plan(nc, node, system_nc, batch_timeout, 0)
        said(plan_text(plan_))
        if plan_.verdict == REFUSED:
            done.append(Restart(node, 0, None, (), False, None, None, "refused: " + "; ".join(plan_.refusals)))
            said(restart_line(done[-1]))
            break
        done.append(await restart_node(nc, plan_, command, time_box=time_box, batch_timeout=batch_timeout,
                                       run_timeout=run_timeout, back_timeout=back_timeout, urls=urls,
                                       system_nc=system_nc, said=said))
        said(restart_line(done[-1]))
        if done[-1].error:
            break
    return done
