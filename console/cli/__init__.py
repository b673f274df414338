"""`batch-console`: the entry point and composition root. Each subcommand is a class of this package
(console.cli.base.Subcommand); the parser is made from them, and a run is the named one's."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

# each module registers its subcommands, in the order `--help` lists them
from console.cli import embedded, collect, analytics, alerts, reports, access, consumers, repair  # noqa: F401
from console.cli.base import SUBCOMMANDS
from console.config import Settings, add_flags, beside_up, load
from console.errors import ConsoleError
from console.redaction import redact_logs


def build_parser() -> argparse.ArgumentParser:
    """The commands and the settings each takes (declared in console.config, each flag with its
    environment twin); a subcommand's own arguments are the only flags declared with it."""
    parser = argparse.ArgumentParser(prog="batch-console", description="The JetStream Batch Console: what happens to "
                                     "atomic and fast-ingest batches, followed, kept and acted on.")
    add_flags(parser, "log", aliases={"--verbose": "-v"})
    commands = parser.add_subparsers(dest="command", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=subcommand.help, description=subcommand.description)
        subcommand.configure(sub)
        if subcommand.settings:
            add_flags(sub, *subcommand.settings, aliases=subcommand.aliases, defaults=subcommand.defaults)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    subcommand = SUBCOMMANDS[args.command]
    settings: Settings | None = None
    try:
        settings = load(args)
        if subcommand.beside_up:  # a command beside a running `up` uses the URLs it chose
            settings = beside_up(settings)
        logging.basicConfig(level=logging.DEBUG if settings.log.verbose else logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request, with its URL as given
        redact_logs(settings)
        return subcommand.run(settings, args)
    except ConsoleError as e:
        print(f"batch-console: {e}", file=sys.stderr)
        return 2
    except (OSError, asyncio.TimeoutError) as e:  # connection refused, unreachable, TLS
        where = settings.connection.describe() if settings else "the configured server"
        print(f"batch-console: cannot reach NATS at {where}: {e or type(e).__name__}", file=sys.stderr)
        return 2

