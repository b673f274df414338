"""The layering in DESIGN.md, enforced: import-linter's contracts in pyproject.toml."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_linter_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
    assert "0 broken" in done.stdout


# What a nats-py connection answers to: outside broker/ a connection is held and handed to broker/,
# never asked anything itself (broker/connection.py has a function for each of these).
NATS_CLIENT_MEMBERS = {"jetstream", "flush", "publish", "subscribe", "request", "drain", "close", "is_connected",
                       "is_closed", "is_reconnecting", "stats", "last_error", "connected_url", "new_inbox"}


def _connection_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in NATS_CLIENT_MEMBERS:
            held = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            if held == "nc" or held.endswith("_nc"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {held}.{node.attr}")
    return found


def test_a_connection_is_asked_things_only_in_broker():
    outside = [p for p in (ROOT / "console").rglob("*.py") if "broker" not in p.relative_to(ROOT).parts]
    assert outside, "no module found to look at"
    assert [use for path in outside for use in _connection_uses(path)] == []


def test_the_connection_check_sees_a_use():
    sample = ROOT / "console" / "broker" / "connection.py"  # where they belong: it must find them
    assert any(".is_connected" in use for use in _connection_uses(sample))


def test_every_type_ignore_in_the_console_says_why():
    """mypy is told to look away only with a reason beside it: `# type: ignore[code]  # why`."""
    bare = [f"{path.relative_to(ROOT)}:{n}" for path in (ROOT / "console").rglob("*.py")
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if "type: ignore" in line and not re.search(r"type: ignore\[[\w-]+(, *[\w-]+)*\]  # \S", line)]
    assert bare == []


def _module_imports() -> dict[str, set[str]]:
    """Each console module's imports of another, at its top and under `if TYPE_CHECKING:` (an import made
    for the types alone still ties the two: the type checker reads both ways)."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (ROOT / "console").rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def read(name: str, statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                read(name, node.body)
            elif isinstance(node, ast.ImportFrom) and node.module in modules:
                graph[name] |= {node.module} | {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & modules.keys()

    for name, path in modules.items():
        read(name, ast.parse(path.read_text()).body)
        graph[name].discard(name)  # a package's __init__ reading its own submodules
    return graph


def test_no_two_modules_read_each_other_not_even_for_their_types():
    graph = _module_imports()
    assert graph["console.domain.checks"] >= {"console.domain.budgets"}, "the module graph was not read"

    def back_to(start: str) -> list[str] | None:  # a path from start's imports back to start, if any
        seen: set[str] = set()
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    assert [cycle for name in sorted(graph) if (cycle := back_to(name))][:1] == []
