"""`batch-console manifests`: what exactly each lost batch is missing and what became of its repair
(console.domain.manifests), of the streams the CLI's user sees."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime, timezone

from console.cli.base import WITH_EVENT_LOG, Subcommand
from console.config import Settings
from console.errors import ConfigError


class Manifests(Subcommand):
    name = "manifests"
    help = ("loss manifests: of each lost batch, the batch sequences missing, how sure that is, and its repair "
            "(open, resent, repaired, partly, not_repairable)")
    settings = (*WITH_EVENT_LOG, "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--stream", help="only this stream's")
        parser.add_argument("--since", default="24h", help="losses of this last while (30m, 12h, 7d; default 24h)")
        parser.add_argument("--format", choices=("text", "json"), default="text")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(manifests_async(settings, args))


async def manifests_async(settings: Settings, args: argparse.Namespace) -> int:
    from console.broker import names
    from console.domain.audit import CLI
    from console.domain.toml_text import duration
    from console.domain.wire import printable
    from console.queries.reads import SystemReads
    from console.queries.sight import Sight
    from console.runtime import Runtime

    since = datetime.now(timezone.utc) - duration(args.since, "--since", None, lambda why, _: ConfigError(why))
    stream = names.stream(args.stream) if args.stream is not None else None
    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  allow_reconnect=False) as runtime:
        found = await SystemReads(runtime, Sight(runtime.actions(CLI).grants)).manifests(since, stream)
    if args.format == "json":
        print(json.dumps([m.as_json() for m in found], indent=2))
        return 0
    print(f"{'TIME (UTC)':<20} {'STREAM':<20} {'BATCH':<34} {'KIND':<17} {'MISSING':<14} {'SURE':<9} STATE")
    for m in found:
        print(f"{m.time:%Y-%m-%d %H:%M:%S} {printable(m.stream, 20):<20} {printable(m.batch, 34):<34} {m.kind:<17} "
              f"{printable(m.missing_text(), 14):<14} {m.certainty:<9} {m.state.replace('_', ' ')}"
              + (f": {printable(m.why, 200)}" if m.why else ""))
    print(f"{len(found)} manifest(s) since {since:%Y-%m-%d %H:%M:%S} UTC")
    return 0
