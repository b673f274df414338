"""From a loss to its repair: `manifests` (what exactly each lost batch is missing and what became of its
repair, console.domain.manifests, of the streams the CLI's user sees), `publish` (one message) and
`republish` (stored messages again), each of those two an audited action of the CLI's user."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone
from typing import Any, TYPE_CHECKING

from console.cli.base import CONNECTED, WITH_EVENT_LOG, Subcommand
from console.config import Settings
from console.errors import ConfigError

if TYPE_CHECKING:
    from console.commands import PublishMessage


class Manifests(Subcommand):
    name = "manifests"
    help = ("loss manifests: of each lost batch, the batch sequences missing, how sure that is, and its repair "
            "(open, resent, repaired, partly, not_repairable)")
    settings = (*WITH_EVENT_LOG, "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--stream", help="only this stream's")
        parser.add_argument("--since", default="24h", help="losses of this last while (30m, 12h, 7d; default 24h)")
        parser.add_argument("--format", choices=("text", "json", "csv", "jsonl"), default="text",
                            help="text (a table), json (the protocol's bodies), csv or jsonl (an export: one flat row "
                                 "each, spans as text, the filters on the first line)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(manifests_async(settings, args))


async def manifests_async(settings: Settings, args: argparse.Namespace) -> int:
    from console.broker import names
    from console.domain.audit import CLI
    from console.domain.manifests import EXPORT_COLUMNS
    from console.domain.toml_text import duration
    from console.export import export_bytes
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
    if args.format in ("csv", "jsonl"):
        filters = {"since": since.isoformat(), "stream": stream}
        sys.stdout.buffer.write(export_bytes(args.format, (m.as_row() for m in found), EXPORT_COLUMNS, filters))
        return 0
    print(f"{'TIME (UTC)':<20} {'STREAM':<20} {'BATCH':<34} {'KIND':<17} {'MISSING':<14} {'SURE':<9} STATE")
    for m in found:
        print(f"{m.time:%Y-%m-%d %H:%M:%S} {printable(m.stream, 20):<20} {printable(m.batch, 34):<34} {m.kind:<17} "
              f"{printable(m.missing_text(), 14):<14} {m.certainty:<9} {m.state.replace('_', ' ')}"
              + (f": {printable(m.why, 200)}" if m.why else ""))
    print(f"{len(found)} manifest(s) since {since:%Y-%m-%d %H:%M:%S} UTC")
    return 0


class Publish(Subcommand):
    name = "publish"
    help = "publish one message with headers on a subject of a stream (audited; refused in read-only mode)"
    settings = (*CONNECTED, "data", "event_log", "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("stream")
        parser.add_argument("subject", help="a subject the stream stores (no wildcard, no $ subject)")
        body = parser.add_mutually_exclusive_group()
        body.add_argument("--data", default="", help="the payload, as text (UTF-8)")
        body.add_argument("--data-file", help="the payload, a file's bytes (1 MiB at most)")
        parser.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'", help="a header (repeat)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(publish_async(settings, args))


class Republish(Subcommand):
    name = "republish"
    help = "publish a range of a stream's stored messages again on a subject of a stream (audited)"
    settings = (*CONNECTED, "data", "event_log", "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("stream")
        parser.add_argument("--from", dest="first", type=int, required=True, help="the first stream sequence")
        parser.add_argument("--to", dest="last", type=int, required=True, help="the last (1,000 at most in all)")
        parser.add_argument("--to-subject", required=True, help="the subject they go to")
        parser.add_argument("--to-stream", help="the stream that stores it (default: the same stream)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(republish_async(settings, args))


def publish_command(args: argparse.Namespace) -> PublishMessage:
    """The action the arguments ask for; ConfigError for arguments that do not make one (nothing sent)."""
    from pathlib import Path

    from console.broker import names
    from console.commands import PublishMessage
    from console.domain.publishing import MAX_PAYLOAD, header_pair, published_headers, published_subject

    try:
        stream, subject = names.stream(args.stream), published_subject(args.subject)
        headers = published_headers(header_pair(h) for h in args.header)
        if args.data_file is not None:
            path = Path(args.data_file)
            if not path.is_file() or path.stat().st_size > MAX_PAYLOAD:
                raise ValueError(f"--data-file: a file of at most {MAX_PAYLOAD:,} bytes")
            payload = path.read_bytes()
        else:
            payload = args.data.encode()
            if len(payload) > MAX_PAYLOAD:
                raise ValueError(f"--data: at most {MAX_PAYLOAD:,} bytes")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return PublishMessage(stream, subject, payload, headers)


async def publish_async(settings: Settings, args: argparse.Namespace) -> int:
    command = publish_command(args)
    return await _act(settings, command)


async def republish_async(settings: Settings, args: argparse.Namespace) -> int:
    from console.broker import names
    from console.commands import RepublishMessages
    from console.domain.publishing import MAX_REPUBLISH, published_subject

    try:
        stream = names.stream(args.stream)
        command = RepublishMessages(stream, args.first, args.last, names.stream(args.to_stream or stream),
                                    published_subject(args.to_subject))
        if not 1 <= args.first <= args.last < 2 ** 63 or args.last - args.first >= MAX_REPUBLISH:
            raise ValueError(f"--from N --to M: 1 <= N <= M, {MAX_REPUBLISH} messages at most")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return await _act(settings, command)


async def _act(settings: Settings, command: Any) -> int:
    from console.domain.audit import CLI
    from console.domain.wire import printable
    from console.runtime import Runtime

    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  allow_reconnect=False) as runtime:
        result = await runtime.actions(CLI).run(command)
    print(f"{command.name} {printable(command.target, 300)}: {command.said(result)}")
    for one in result if isinstance(result, list) else []:
        if one.problem:
            print(f"  seq {one.seq}: {printable(one.problem, 300)}")
    return 0
