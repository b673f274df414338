"""A command of the registry whose work is the test's: its name, role, read-only rule and audit record
are the real class's, so Actions checks and records it as it would the real one."""

from __future__ import annotations

from typing import Any, Callable

from console.commands import COMMANDS, Command


def doing(command: type[Command] | str, target: str = "ORDERS", stream: str | None = None,
          work: Callable[[], Any] = lambda: None) -> Command:
    cls = COMMANDS[command] if isinstance(command, str) else command

    async def execute(self, services, asker):
        return work()

    # A subclass that names no action of its own is not registered: the registry stays the console's.
    return type(f"Test{cls.__name__}", (cls,), {"__init__": lambda self: None, "execute": execute,
                                                 "target": target, "on_stream": stream, "also_on_streams": (), "diff": lambda self: None,
                                                 "said": lambda self, result: ""})()
