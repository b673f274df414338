"""The wire behind one seam: console/broker/nats_internals.py is the only module that names nats-py's private
state, and on the release pyproject.toml pins, every fast path it serves is on."""

import ast
import inspect
import re
from pathlib import Path

import nats.aio.client
import nats.aio.msg
import nats.aio.subscription
import nats.js.client
import nats.protocol.parser

from console.broker.nats_internals import fast_paths

CONSOLE = Path(__file__).resolve().parents[2] / "console"
SEAM = CONSOLE / "broker" / "nats_internals.py"


def nats_private_names() -> set[str]:
    """Every `_name` nats-py's client, subscription, message, JetStream context and parser keep or define."""
    names = {n for n in vars(nats.aio.client.Client()) if n.startswith("_")}
    for module in (nats.aio.client, nats.aio.subscription, nats.aio.msg, nats.js.client, nats.protocol.parser):
        source = inspect.getsource(module)
        names |= set(re.findall(r"self\.(_[a-z][a-z0-9_]*)", source))
        names |= set(re.findall(r"^\s+(?:async )?def (_[a-z][a-z0-9_]*)", source, re.M))
    return {n for n in names if not n.startswith("__")}


def reaches(tree: ast.AST, private: set[str]) -> set[str]:
    """The private names a module reaches into on something not its own (`self`, `cls`): as attributes, or
    by name through getattr, setattr, hasattr and delattr."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in private:
            found.add(node.args[1].value)
    return found


def test_no_module_but_the_seam_names_nats_pys_private_state():
    private = nats_private_names()
    assert {"_pending", "_process_msg", "_server_info", "_ps"} <= private  # the scan finds what the seam uses
    offenders = {str(path.relative_to(CONSOLE)): sorted(found) for path in CONSOLE.rglob("*.py") if path != SEAM
                 if (found := reaches(ast.parse(path.read_text()), private))}
    assert offenders == {}, f"through console/broker/nats_internals.py instead: {offenders}"
    assert reaches(ast.parse(SEAM.read_text()), private)  # and the seam does (the scan can fail)


def test_the_guard_finds_a_reach_by_attribute_and_by_name():
    private = {"_pending"}
    assert reaches(ast.parse("nc._pending.append(b'')"), private) == {"_pending"}
    assert reaches(ast.parse("getattr(nc, '_pending', None)"), private) == {"_pending"}
    assert reaches(ast.parse("self._pending = []"), private) == set()


def test_every_fast_path_is_on_with_the_pinned_nats_py():
    assert fast_paths(nats.aio.client.Client()) == {"publish": None, "tap": None, "parser": None}


def fetches_caught_narrowly(tree: ast.AST) -> list[int]:
    """Lines of `try` blocks that call `.fetch(..., timeout=...)` and catch nats-py's TimeoutError alone: past
    its deadline nats-py's fetch raises asyncio's plain TimeoutError, which that misses (the demo's reader let
    one through under load and its first round published nothing)."""
    def caught(handler: ast.ExceptHandler) -> set[str]:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return {ast.unparse(t) for t in types if t is not None} if handler.type is not None else {"*"}

    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        fetches = any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                      and call.func.attr == "fetch" and any(k.arg == "timeout" for k in call.keywords)
                      for stmt in node.body for call in ast.walk(stmt))
        names = set().union(*(caught(h) for h in node.handlers)) if node.handlers else set()
        if fetches and "nats.errors.TimeoutError" in names \
                and not names & {"asyncio.TimeoutError", "TimeoutError", "Exception", "BaseException", "*"}:
            lines.append(node.lineno)
    return lines


def test_a_fetchs_time_out_is_caught_as_asyncios():
    offenders = {str(path.relative_to(CONSOLE)): found for path in CONSOLE.rglob("*.py")
                 if (found := fetches_caught_narrowly(ast.parse(path.read_text())))}
    assert offenders == {}, f"catch asyncio.TimeoutError around a fetch with a timeout: {offenders}"
    assert fetches_caught_narrowly(ast.parse(
        "try:\n    m = await sub.fetch(1, timeout=1)\nexcept nats.errors.TimeoutError:\n    pass")) == [1]
    assert fetches_caught_narrowly(ast.parse(
        "try:\n    m = await sub.fetch(1, timeout=1)\nexcept asyncio.TimeoutError:\n    pass")) == []
