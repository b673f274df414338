"""The reading subcommands: the audit trail, health checks, conformance verdicts, the monthly report, a
bounded search and the canaries (a round, or on a schedule)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from datetime import datetime, timezone
from typing import Any

from console.broker import names
from console.cli.base import WITH_EVENT_LOG, Subcommand, window_minutes
from console.config import Settings
from console.domain.audit import CLI
from console.domain.systems import domain_name
from console.errors import ConfigError, ConsoleError
from console.export import FORMATS
from console.runtime import Runtime


class Audit(Subcommand):
    name, help = "audit", "who asked the console to change what, and when: the audit trail, its chain checked"
    settings = (*WITH_EVENT_LOG, "fleet", "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--since", help="only the records of this last while (30m, 12h, 7d); the chain is "
                                            "checked from the first of them")
        parser.add_argument("--verify", action="store_true", help="exit 1 when the chain is broken: a record "
                                                                  "removed, altered or not the console's")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(audit_async(settings, args.since, args.verify))


class Check(Subcommand):
    name = "check"
    help = ("batch health checks: coded findings with severity, evidence and remedy; exit 0 ok, 1 warning, "
            "2 critical, 3 unknown (Nagios)")
    settings = (*WITH_EVENT_LOG, "system", "checks", "fleet", "collector.domains")
    aliases = {"--check-window": "--window", "--check-thresholds": "--threshold"}

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--format", choices=["text", "json", "nagios", "prometheus"], default="text")
        parser.add_argument("--stream", type=names.stream, help="only this stream's findings")
        parser.add_argument("--code", action="append", help="only this check (BATCH_009; repeatable)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.checks import run_check

        return asyncio.run(run_check(settings, args.format, args.code, args.stream))


class Conformance(Subcommand):
    name = "conformance"
    help = ("which batch publishers follow ADR-50, judged on the wire: a verdict per client and statement; "
            "exit 0 all conform, 1 one does not, 3 no verdict")
    settings = (*WITH_EVENT_LOG, "fleet")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--format", choices=["text", "json", "markdown"], default="text")
        parser.add_argument("--window", type=window_minutes, default=24 * 60,
                            help="minutes of the event log to read the latest verdicts from (default a day)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.conformance import run_conformance

        return asyncio.run(run_conformance(settings, args.format, args.window))


class Canary(Subcommand):
    name = "canary"
    help = ("canary batches, atomic and fast, through every node on a schedule: times to the first ack and the "
            "commit, losses; results in the event log (--once: one round, printed; exit 1 when one failed)")
    settings = (*WITH_EVENT_LOG, "system", "fleet")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="one round, printed, its streams deleted after")
        parser.add_argument("--every", type=float, default=60.0, help="seconds between rounds (default 60)")
        parser.add_argument("--messages", type=int, default=10, help="messages in each canary batch (3 to 1000)")
        parser.add_argument("--timeout", type=float, default=5.0, help="seconds a batch waits for each reply")
        parser.add_argument("--format", choices=["text", "json"], default="text")
        parser.add_argument("--domain", action="append", default=[], metavar="NAME",
                            help="a leaf node's JetStream domain to send canary batches through too, reached "
                                 "through this server (repeatable; default: the collector's --domain, or none)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(canary_async(settings, args))


class Report(Subcommand):
    name = "report"
    help = ("a month's losses per loss objective, stream and publisher, from the analytics tables (History's "
            "numbers): Markdown, or HTML with plots")
    settings = ("data",)

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--month", help="YYYY-MM (default: this month, UTC)")
        parser.add_argument("--format", choices=["markdown", "html"], default="markdown")
        parser.add_argument("--output", help="a file to write it to (default: standard output)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.report import run_report

        return run_report(settings, args.month, args.format, args.output)


class Search(Subcommand):
    name = "search"
    help = ("search any stream, bounded: a subject filter and a window the server applies, a CEL predicate over "
            "headers and payload; matches as JSON lines, progress on stderr")
    settings = (*WITH_EVENT_LOG, "access.roles", "access.local_role")

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("stream", help="the stream to search")
        parser.add_argument("--subject", help="a subject filter (wildcards), applied by the server")
        parser.add_argument("--from-seq", type=int, help="the first stream sequence")
        parser.add_argument("--to-seq", type=int, help="the last stream sequence")
        parser.add_argument("--since", help="from this time (ISO 8601 with a zone)")
        parser.add_argument("--until", help="to this time (ISO 8601 with a zone)")
        parser.add_argument("--where", help='a CEL expression over subject, seq, time, headers, size, text, payload '
                                            '(e.g. \'payload.amount > 100 && headers["kind"] == "refund"\')')
        parser.add_argument("--newest-first", action="store_true", help="read from the end backwards")
        parser.add_argument("--max-scanned", type=int, default=1_000_000, help="messages read at most")
        parser.add_argument("--max-bytes", type=int, default=1 << 30, help="payload bytes read at most")
        parser.add_argument("--max-matches", type=int, default=1000, help="matches at most")
        parser.add_argument("--max-seconds", type=float, default=60.0, help="seconds at most")
        parser.add_argument("--output", help="export the matches to this file, streamed (memory flat whatever the size)")
        parser.add_argument("--format", choices=list(FORMATS), default="jsonl",
                            help="the export's format (with --output)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.search import run_search

        return asyncio.run(run_search(settings, args))


async def canary_async(settings: Settings, args: argparse.Namespace) -> int:
    from console.broker.eventlog import EventLog
    from console.canary import CanaryOptions, as_json_lines, as_text
    from console.commands import RunCanary

    if not 3 <= args.messages <= 1000 or not 0.1 <= args.timeout <= 60 or not 1 <= args.every <= 86_400:
        raise ConfigError("--messages is 3 to 1000, --timeout 0.1 to 60 s, --every 1 s to a day")
    try:
        named = tuple(dict.fromkeys(domain_name(d) for d in args.domain))
    except ValueError as e:
        raise ConfigError(f"--domain: {e}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def one(each: Settings) -> list[Any]:
        """One system's canary, into its own event log; a system not reached is said, the others go on."""
        options = CanaryOptions(each.fleet.name, args.messages, args.timeout, args.every, args.once,
                                named or each.collector.domains)
        try:
            async with await Runtime.open(each, give_up_after=each.connection.connect_timeout,
                                          writes_events=not args.once) as runtime:
                log = None if args.once else EventLog.over(runtime.nc, runtime.event_log)
                if log is not None:
                    await log.ensure()
                return (await runtime.actions(CLI).run(RunCanary(options, log, stop.is_set))).results
        except (ConsoleError, OSError, asyncio.TimeoutError) as e:
            if not settings.systems():
                raise
            print(f"system {each.fleet.name}: not reached: {str(e)[:300]}", file=sys.stderr)
            return []

    systems = [settings.of_system(spec) for spec in settings.systems()] or [settings]
    results = [r for found in await asyncio.gather(*(one(each) for each in systems)) for r in found]
    print(as_json_lines(results) if args.format == "json" else as_text(results))
    reached = len({r.system for r in results}) == len(systems)
    return canary_exit(results, reached)


def canary_exit(results: list[Any], reached: bool) -> int:
    """As `check` exits (Nagios' codes): 2 when a node's canaries fail, 1 when one is slow, led elsewhere or its
    canary stream was changed by someone else, 3 when a system was not reached, else 0."""
    from console.domain.canary import node_health
    from console.domain.checks import CHECKS

    slow_ms = CHECKS["BATCH_032"].thresholds["slow_ms"]
    worst = 0
    for health in node_health(results):
        found = health.finding(slow_ms)
        if found is not None:
            worst = max(worst, 2 if found[0] == "critical" else 1)
        if health.tampering() is not None:
            worst = max(worst, 1)
    return worst if reached or worst == 2 else 3


async def audit_async(settings: Settings, since: str | None, verify: bool) -> int:
    from console.domain.toml_text import duration

    start = datetime.now(timezone.utc) - duration(since, "--since", None, lambda why, _: ConfigError(why)) if since else None
    systems = settings.systems()
    if not systems:
        return await _audit_one(settings, start, verify)
    broken = False
    for spec in systems:  # one after the other: each system's records, then its chain's verdict
        print(f"== system {spec.name} ==", file=sys.stderr)
        try:
            broken |= await _audit_one(settings.of_system(spec), start, verify) != 0
        except (ConsoleError, OSError, asyncio.TimeoutError) as e:
            print(f"system {spec.name}: not read: {str(e)[:300]}", file=sys.stderr)
            broken = broken or verify
    return 1 if broken else 0


async def _audit_one(settings: Settings, start: datetime | None, verify: bool) -> int:
    from console.queries.reads import SystemReads
    from console.queries.sight import Sight

    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout) as runtime:
        # its records as the local role is shown them (the chain's verdict is the whole trail's)
        checked = await SystemReads(runtime, Sight(runtime.actions(CLI).grants)).audit(start)
    for seq, r in checked.records:
        diff = "".join(f" {k}: {a} -> {b}" for k, (a, b) in r.diff.items())
        print(f"{seq:>7} {r.time:%Y-%m-%d %H:%M:%S} {r.actor.user} {r.actor.address or '-'} {r.action} {r.target} "
              f"{r.outcome}{(': ' + r.detail) if r.detail else ''}{diff}")
    for seq, why in checked.breaks:
        print(f"BROKEN at record {seq}: {why}" if seq else f"BROKEN: {why}", file=sys.stderr)
    if checked.unsafe:
        print(f"UNSAFE: {checked.unsafe}", file=sys.stderr)
    print(f"{checked.counted()}; chain {'intact' if checked.intact else 'BROKEN'}{checked.aged()}",
          file=sys.stderr)
    return 1 if verify and not checked.intact else 0
