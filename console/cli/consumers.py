"""`batch-console consumers`: every consumer's lag and state (`list`), and the changes an operator makes to
one (`pause`, `resume`, `reset`, `unpin`, `delete`), each an audited action of the CLI's user."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, TYPE_CHECKING

from console.cli.base import CONNECTED, Subcommand
from console.config import Settings
from console.errors import ConfigError

if TYPE_CHECKING:
    from console.commands import ConsumerCommand
    from console.consumers import Reading

ACTIONS = ("list", "pause", "resume", "reset", "unpin", "delete")


class Consumers(Subcommand):
    name = "consumers"
    help = ("consumer lag and stalls: `list` every consumer's pending, lag in seconds and state; `pause`, `resume`, "
            "`reset`, `unpin`, `delete` one (audited; refused in read-only mode)")
    settings = (*CONNECTED, "data", "event_log", "access.roles", "access.local_role", "fleet", "collector.domains")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("target", nargs="*", metavar="STREAM NAME", help="the consumer (all but list)")
        parser.add_argument("--stream", help="list: only this stream's consumers")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("--window", type=float, default=0.0,
                            help="list: read twice, this many seconds apart, to judge stalls and trends (default: once)")
        parser.add_argument("--until", help="pause: until this time (ISO 8601; no zone: UTC)")
        parser.add_argument("--for", dest="pause_for", help="pause: for this long (30s, 5m, 1h, 1d)")
        parser.add_argument("--seq", type=int, help="reset: its next message is this stream sequence")
        parser.add_argument("--time", help="reset: its next message the first stored at or after this time")
        parser.add_argument("--group", help="unpin: the priority group whose pinned client is let go")
        parser.add_argument("--in-domain", help="all but list: the consumer is a leaf node's, of this JetStream domain "
                                                "(list reads every --domain given)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(run_consumers(settings, args))


def command_of(args: argparse.Namespace, now: datetime) -> ConsumerCommand[Any]:
    """The audited command the arguments ask for; ConfigError for arguments that do not make one."""
    from console.broker import names
    from console.commands import DeleteConsumer, PauseConsumer, ResetConsumer, ResumeConsumer, UnpinConsumer
    from console.domain.consumer_lag import given_time, pause_end
    from console.domain.toml_text import duration

    if len(args.target) != 2:
        raise ConfigError(f"consumers {args.action} STREAM NAME")
    stream, name = names.stream(args.target[0]), names.consumer(args.target[1])
    where = {"domain": names.domain(args.in_domain)} if args.in_domain is not None else {}
    try:
        if args.action == "pause":
            if (args.until is None) == (args.pause_for is None):
                raise ConfigError("consumers pause STREAM NAME --until TIME | --for 60s")
            until = given_time(args.until, "--until") if args.until else \
                now + duration(args.pause_for, "--for", None, lambda why, _: ConfigError(why))
            return PauseConsumer(stream, name, pause_end(until, now), **where)
        if args.action == "reset":
            if (args.seq is None) == (args.time is None):
                raise ConfigError("consumers reset STREAM NAME --seq N | --time TIME")
            if args.seq is not None and not 1 <= args.seq < 2 ** 63:
                raise ConfigError("--seq must be a stream sequence (1 or more)")
            return ResetConsumer(stream, name, args.seq, given_time(args.time, "--time") if args.time else None, **where)
        if args.action == "unpin":
            if not args.group or len(args.group) > 16 or not args.group.isprintable():
                raise ConfigError("consumers unpin STREAM NAME --group GROUP (a group name of 1..16 characters)")
            return UnpinConsumer(stream, name, args.group, **where)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return (ResumeConsumer if args.action == "resume" else DeleteConsumer)(stream, name, **where)


async def run_consumers(settings: Settings, args: argparse.Namespace) -> int:
    from console.consumers import Reading, text_table
    from console.domain.audit import CLI
    from console.runtime import Runtime

    if args.action != "list":
        command = command_of(args, datetime.now(timezone.utc))
        if settings.systems():
            raise ConfigError(f"consumers {args.action} acts on one system: give its server, not --systems")
    elif args.target or args.in_domain is not None:
        raise ConfigError("consumers list [--stream S]: no positional names (--domain D reads a leaf's too)")
    elif not 0 <= args.window <= 3600:
        raise ConfigError("--window must be 0..3600 seconds")
    if args.action != "list":
        async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                      allow_reconnect=False) as runtime:
            result = await runtime.actions(CLI).run(command)
        print(f"{command.name} {command.target}: done" + (f" ({command.said(result)})" if result is not None
                                                          and command.said(result) else ""))
        return 0
    systems = settings.systems()
    if not systems:
        reading = await _read(settings, args)
    else:  # every system at once, each consumer named with its system; one not reached is said
        found = await asyncio.gather(*(_read(settings.of_system(s), args) for s in systems), return_exceptions=True)
        reading = Reading()
        for system, one in zip(systems, found):
            if isinstance(one, BaseException):
                reading.unread[f"system {system.name}"] = f"not read: {str(one)[:200] or type(one).__name__}"
                continue
            reading.judged += one.judged
            reading.unread.update({f"{system.name}/{k}": v for k, v in one.unread.items()})
            reading.malformed.update(one.malformed)
            reading.requests += one.requests
            reading.seconds = max(reading.seconds, one.seconds)
    if args.format == "json":
        print(json.dumps([j.as_json() for j in reading.judged], indent=2))
    else:
        print(text_table(reading, by_system=bool(systems)))
    if args.format == "json":  # the table says them; JSON keeps stdout one document
        for where, why in sorted(reading.unread.items()):
            print(f"unread {where[:200]}: {why[:300]}", file=sys.stderr)
    if reading.unread or reading.malformed:
        print(f"{len(reading.unread)} streams or systems unread, {sum(reading.malformed.values())} replies left out",
              file=sys.stderr)
    return 0


async def _read(settings: Settings, args: argparse.Namespace) -> Reading:
    """One system's consumers (of one stream, when asked), read once or twice `--window` seconds apart."""
    from console.broker import names
    from console.consumers import WINDOW, ConsumerWatch, only, operators_streams, read_twice
    from console.runtime import Runtime

    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  allow_reconnect=False) as runtime:
        choose = only([names.stream(args.stream)]) if args.stream else operators_streams(settings.event_log.stream)
        watch = ConsumerWatch(runtime.system.consumer_admin, choose, runtime.system.name,
                              timedelta(seconds=args.window or WINDOW.total_seconds()), settings.collector.domains)
        try:
            return await (read_twice(watch, args.window) if args.window else watch.read(fresh_within=0))
        finally:
            await watch.stop()
