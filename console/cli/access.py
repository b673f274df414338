"""The subcommands that act: a probe's test batches, a node's maintenance, API tokens and the MCP server."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import datetime, timezone

from console.cli.base import CONNECTED, Subcommand
from console.config import Settings
from console.domain.audit import CLI
from console.domain.fast_ingest import GapMode
from console.errors import ConfigError
from console.commands import RunProbe
from console.probe import ProbeOptions
from console.progress import ProgressBar
from console.runtime import Runtime


class Token(Subcommand):
    name = "token"
    help = "API tokens (/api/v1): create one (printed once, as the last line), list them, revoke one"
    settings = ("data", "access.roles")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("create", "list", "revoke"))
        parser.add_argument("name", nargs="?", help="revoke: the token's name")
        parser.add_argument("--name", dest="token_name", help="create: the token's name (letters, digits, '_', '.', '-')")
        parser.add_argument("--role", help="create: a role of the roles file (viewer, operator, admin by default)")
        parser.add_argument("--expires", help="create: how long it holds (30d, 12h); default: until revoked")
        parser.add_argument("--rate", type=float, default=20.0, help="create: calls a second it may make, twice as "
                                                                     "many at once (default: %(default)s)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return cmd_token(settings, args)


class Mcp(Subcommand):
    name = "mcp"
    help = ("an MCP server (stdio) for assistants: read-only tools over a running console's /api/v1, with the token "
            "in BATCH_CONSOLE_API_TOKEN")
    description = ("An MCP server (stdio) for assistants over a running console's /api/v1. The API token "
                   "(batch-console token create) is read from $BATCH_CONSOLE_API_TOKEN, never from a flag: a command "
                   "line is anyone's to read in ps.")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--api-url", default="http://127.0.0.1:8050", help="the console's URL (default: %(default)s)")
        parser.add_argument("--writes", action="store_true", help="also the tools that change the server "
                                                                  "(edit_stream, mute_rule, unmute_rule), each an "
                                                                  "audited action of the API")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.api.mcp_server import run as run_mcp

        run_mcp(args.api_url, os.environ.get("BATCH_CONSOLE_API_TOKEN", ""), args.writes)  # never on a command line
        return 0


class Maintain(Subcommand):
    name = "maintain"
    help = ("a node's maintenance without losing a batch: `plan NODE` says what taking it out would do; "
            "`drain NODE` moves every leadership off it between batches (exit 1 refused or not all moved)")
    settings = ("connection", "data", "event_log", "system", "collector.batch_timeout", "access.roles",
                "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        from console.maintain import add_arguments

        add_arguments(parser)

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.maintain import run_maintain

        return asyncio.run(run_maintain(settings, args))


class Probe(Subcommand):
    name, help = "probe", "publish test batches and report what happened"
    settings = (*CONNECTED, "data", "event_log", "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("kind", choices=["atomic", "fast"])
        test = parser.add_argument_group("the test (arguments of one run: no environment twins)")
        test.add_argument("--stream", default="BATCH_PROBE", help="created with the needed flag when missing")
        test.add_argument("--subject", default="batch_probe.test")
        test.add_argument("--count", type=int, default=1000, help="messages in all")
        test.add_argument("--size", type=int, default=128, help="payload bytes")
        test.add_argument("--batch-size", type=int, default=100, help="atomic: messages per batch")
        test.add_argument("--eob", action="store_true", help="atomic: commit with an end-of-batch marker")
        test.add_argument("--flow", type=int, default=500,
                          help="fast: acks requested every N messages (the server grants 500 at most)")
        test.add_argument("--max-outstanding-acks", type=int, default=2, choices=[1, 2, 3])
        test.add_argument("--gap-mode", choices=[m.value for m in GapMode], default=GapMode.FAIL.value)
        test.add_argument("--skip-seq", type=int, help="never send this batch sequence (inject a gap)")
        test.add_argument("--abandon", action="store_true", help="stop before the commit (the server abandons it)")
        test.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
        test.add_argument("--repair", action="store_true",
                          help="take part in the loss manifests' protocol: keep what was sent, send again what a "
                               "manifest of a lost batch names, and wait for the console's verdict")
        test.add_argument("--repair-wait", type=float, default=60.0, help="seconds to wait for that verdict")
        test.add_argument("--json", action="store_true", help="print one JSON object")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(probe_async(settings, args))


async def probe_async(settings: Settings, args: argparse.Namespace) -> int:
    options = ProbeOptions(
        kind=args.kind, stream=args.stream, subject=args.subject, count=args.count, size=args.size,
        batch_size=args.batch_size, eob=args.eob, flow=args.flow, max_outstanding_acks=args.max_outstanding_acks,
        gap_mode=GapMode(args.gap_mode), skip_seq=args.skip_seq, abandon=args.abandon, timeout=args.timeout,
        repair=args.repair, repair_wait=args.repair_wait,
    )
    bar = ProgressBar(options.count, f"{options.kind} probe")
    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  allow_reconnect=False) as runtime:
        try:
            key = runtime.event_log.key if options.repair else None  # verifies the console's manifests
            report = await runtime.actions(CLI).run(RunProbe(options, bar.update, key))
        finally:
            bar.close()
    print(json.dumps(report.to_json()) if args.json else report.text())
    injected = options.skip_seq is not None or options.abandon
    return 1 if report.error and not injected else 0


def utc(when: str) -> str:
    """A token's time as `token list` says it: to the second, in UTC, and saying so."""
    try:
        return datetime.fromisoformat(when).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return when[:32]


def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    from console.api.tokens import TokenStore
    from console.domain.toml_text import duration
    from console.services.roles import RolesWatch

    store = TokenStore(settings.data.data_dir)
    if args.action == "list":
        now = datetime.now(timezone.utc)
        for t in store.tokens().values():
            state = f"revoked {utc(t.revoked)}" if t.revoked else "EXPIRED" if t.expired(now) else \
                f"until {utc(t.expires)}" if t.expires else "until revoked"
            print(f"{t.name:<24} {t.role:<16} {t.rate:>6g}/s  created {utc(t.created)}  {state}")
        return 0
    if args.action == "revoke":
        if not args.name:
            raise ConfigError("token revoke NAME")
        if not store.revoke(args.name):
            raise ConfigError(f"no token {args.name[:64]!r} to revoke")
        print(f"token {args.name} revoked", file=sys.stderr)
        return 0
    if not args.token_name or not args.role:
        raise ConfigError("token create --name NAME --role ROLE [--expires 30d]")
    roles = RolesWatch(settings.access)()
    if args.role not in roles.roles:
        raise ConfigError(f"no role {args.role[:64]!r} (roles: {', '.join(sorted(roles.roles))})")
    expires = duration(args.expires, "--expires", None, lambda why, _: ConfigError(why)) if args.expires else None
    made = store.create(args.token_name, args.role, expires, args.rate)
    print(f"token {args.token_name} for role {args.role}: shown once, keep it as a secret", file=sys.stderr)
    print(made)
    return 0
