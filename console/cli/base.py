"""What every `batch-console` subcommand is: one small class naming itself, its help, the settings it takes
(console.config's groups, each flag with its environment twin), its own arguments and its run. A new
subcommand is one class in this package, registered by its name."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any, Awaitable, ClassVar

from console.backoff import Backoff, keep_trying
from console.config import Settings
from console.runtime import Runtime

log = logging.getLogger("batch-console")

CONNECTED = ("connection",)
WITH_EVENT_LOG = (*CONNECTED, "data", "event_log")
SUBCOMMANDS: dict[str, type[Subcommand]] = {}  # name -> its class, in the order `--help` lists them


class Subcommand:
    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str | None] = None
    settings: ClassVar[tuple[str, ...]] = ()  # console.config's groups (or group.field) given as flags
    aliases: ClassVar[dict[str, str]] = {}
    defaults: ClassVar[dict[str, Any]] = {}
    beside_up: ClassVar[bool] = True  # its settings take the URLs a running `up` chose

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            assert cls.name not in SUBCOMMANDS, cls.name
            SUBCOMMANDS[cls.name] = cls

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        """Its own arguments (those of one run, without environment twins)."""

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        raise NotImplementedError


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    return stop


def window_minutes(text: str) -> float:
    """Minutes of the event log: more than 0, at most a year."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text[:40]!r}") from None
    if not 0 < value <= 365 * 24 * 60:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"minutes must be more than 0 and at most a year: {text[:40]!r}")
    return value


async def opened(settings: Settings, stop: asyncio.Event, said: str, retry: bool, **options: Any) -> Runtime | None:
    """A runtime on the settings' system; with `retry` (one of several systems), one that cannot be reached
    is said and tried again, with a growing pause up to 30 s, until it opens (None: stopped meanwhile)."""
    from console.errors import NatsUnreachableError

    def attempt() -> Awaitable[Runtime]:
        return Runtime.open(settings, give_up_after=settings.connection.connect_timeout if retry else 30.0, **options)

    if not retry:
        return await attempt()
    return await keep_trying(attempt, Backoff(first=1.0, most=30.0), NatsUnreachableError, lambda e, wait: log.warning(
        "%snot reachable (%s): trying again in %gs; the other systems go on meanwhile", said, e, wait), stop)
