"""`batch-console`: the entry point and composition root."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import os
import json
import logging
import secrets
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from datetime import datetime, timedelta, timezone

from console.broker.cluster import EmbeddedCluster
from console.export import FORMATS
from console.broker.quarantine import QuarantineSettings
from console.broker import names
from console.broker.connection import cancelled, close, connect
from console.broker.server import BatchLimits, EmbeddedServer
from console.collector.collector import Collector
from console.collector.kept import KeptMessages
from console.config import (
    EMBEDDED_SYSTEM_USER, KEY_WAIT, METRICS_FD_ENV, SERVER_READY, SYSTEM_PASSWORD_FILE, UP_DRIVER_MEMORY, Settings, add_flags,
    beside_up, load, Watched, private_dir, private_file, spark_options,
)
from console.domain.audit import CLI
from console.domain.fast_ingest import GapMode
from console.domain.events import EventKind
from console.errors import ConfigError, ConsoleError
from console.probe import ProbeOptions
from console.progress import ProgressBar
from console.redaction import redact_logs
from console.runtime import Runtime, objectives_of

log = logging.getLogger("batch-console")

CONNECTED = ("connection",)
ALERTS_AGAIN = 5.0  # seconds before one system's alerts that failed are started again (of several)
WITH_EVENT_LOG = (*CONNECTED, "data", "event_log")


def window_minutes(text: str) -> float:
    """Minutes of the event log: more than 0, at most a year."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text[:40]!r}") from None
    if not 0 < value <= 365 * 24 * 60:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"minutes must be more than 0 and at most a year: {text[:40]!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The commands and the settings each takes (declared in console.config, each flag with its
    environment twin); a probe's own arguments are the only flags declared here."""
    parser = argparse.ArgumentParser(prog="batch-console", description=__doc__)
    add_flags(parser, "log", aliases={"--verbose": "-v"})
    commands = parser.add_subparsers(dest="command", required=True)

    server = commands.add_parser("server", help="run the embedded nats-server in the foreground")
    add_flags(server, "data", "embedded", aliases={"--nats-host": "--host", "--nats-port": "--port",
                                                   "--nats-batch-timeout": "--batch-timeout",
                                                   "--nats-batch-max-msgs": "--batch-max-msgs"})

    collect = commands.add_parser("collect", help="capture batch advisories and the $FI tap into the event log")
    add_flags(collect, *WITH_EVENT_LOG, "system", "collector", "fleet",
              defaults={"collector.cpu": "adaptive", "collector.pace_ms": 10.0})

    analytics = commands.add_parser("analytics", help="keep abandonment and gap history in SQLite and Delta (PySpark)")
    add_flags(analytics, *WITH_EVENT_LOG, "analytics", "fleet", aliases={"--analytics-every": "--every",
                                                                "--spark-master": "--master"})
    analytics.add_argument("--once", action="store_true", help="one run, then exit (default: a run every "
                                                               "--analytics-every seconds until stopped)")

    alerts = commands.add_parser("alerts", help="alert rules over the event log: notifications and Prometheus metrics")
    add_flags(alerts, *WITH_EVENT_LOG, "alerting", "checks", "system", "fleet")

    serve = commands.add_parser("serve", help="the web console (Panel)")
    add_flags(serve, *WITH_EVENT_LOG, "web", "access", "alerting.console_url", "fleet")

    up = commands.add_parser("up", help="the whole console under one supervisor (the embedded nats-server unless "
                                        "--server names an existing NATS)")
    add_flags(up, *WITH_EVENT_LOG, "system", "collector", "analytics", "web", "access", "embedded", "demo",
              "alerting", "checks", "fleet", defaults={"analytics.follow": True,
                                                       "analytics.driver_memory": UP_DRIVER_MEMORY})

    demo = commands.add_parser("demo", help="demo traffic: every batch outcome, on demo streams it creates")
    add_flags(demo, *CONNECTED, "demo.demo_every", "demo.demo_rounds",
              aliases={"--demo-every": "--every", "--demo-rounds": "--rounds"})

    token = commands.add_parser("token", help="API tokens (/api/v1): create one (printed once, as the last line), "
                                              "list them, revoke one")
    add_flags(token, "data", "access.roles")
    token.add_argument("action", choices=("create", "list", "revoke"))
    token.add_argument("name", nargs="?", help="revoke: the token's name")
    token.add_argument("--name", dest="token_name", help="create: the token's name (letters, digits, '_', '.', '-')")
    token.add_argument("--role", help="create: a role of the roles file (viewer, operator, admin by default)")
    token.add_argument("--expires", help="create: how long it holds (30d, 12h); default: until revoked")
    token.add_argument("--rate", type=float, default=20.0, help="create: calls a second it may make, twice as many "
                                                                "at once (default: %(default)s)")

    mcp = commands.add_parser("mcp", help="an MCP server (stdio) for assistants: read-only tools over a running "
                                          "console's /api/v1, with the token in BATCH_CONSOLE_API_TOKEN",
                              description="An MCP server (stdio) for assistants over a running console's /api/v1. "
                                          "The API token (batch-console token create) is read from "
                                          "$BATCH_CONSOLE_API_TOKEN, never from a flag: a command line is anyone's "
                                          "to read in ps.")
    mcp.add_argument("--api-url", default="http://127.0.0.1:8050", help="the console's URL (default: %(default)s)")
    mcp.add_argument("--writes", action="store_true", help="also the tools that change the server (edit_stream, "
                                                           "mute_rule, unmute_rule), each an audited action of the API")

    audit = commands.add_parser("audit", help="who asked the console to change what, and when: the audit trail, "
                                              "its chain checked")
    add_flags(audit, *WITH_EVENT_LOG, "fleet", "access.roles", "access.local_role")
    audit.add_argument("--since", help="only the records of this last while (30m, 12h, 7d); the chain is checked "
                                       "from the first of them")
    audit.add_argument("--verify", action="store_true", help="exit 1 when the chain is broken: a record removed, "
                                                             "altered or not the console's")

    check = commands.add_parser("check", help="batch health checks: coded findings with severity, evidence and "
                                              "remedy; exit 0 ok, 1 warning, 2 critical, 3 unknown (Nagios)")
    add_flags(check, *WITH_EVENT_LOG, "system", "checks", "fleet",
              aliases={"--check-window": "--window", "--check-thresholds": "--threshold"})
    check.add_argument("--format", choices=["text", "json", "nagios", "prometheus"], default="text")
    check.add_argument("--stream", type=names.stream, help="only this stream's findings")
    check.add_argument("--code", action="append", help="only this check (BATCH_009; repeatable)")

    conformance = commands.add_parser("conformance", help="which batch publishers follow ADR-50, judged on the wire: "
                                                          "a verdict per client and statement; exit 0 all conform, "
                                                          "1 one does not, 3 no verdict")
    add_flags(conformance, *WITH_EVENT_LOG, "fleet")
    conformance.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    conformance.add_argument("--window", type=window_minutes, default=24 * 60,
                             help="minutes of the event log to read the latest verdicts from (default a day)")

    canary = commands.add_parser("canary", help="canary batches, atomic and fast, through every node on a schedule: "
                                                "times to the first ack and the commit, losses; results in the event "
                                                "log (--once: one round, printed; exit 1 when one failed)")
    add_flags(canary, *WITH_EVENT_LOG, "system", "fleet")
    canary.add_argument("--once", action="store_true", help="one round, printed, its streams deleted after")
    canary.add_argument("--every", type=float, default=60.0, help="seconds between rounds (default 60)")
    canary.add_argument("--messages", type=int, default=10, help="messages in each canary batch (3 to 1000)")
    canary.add_argument("--timeout", type=float, default=5.0, help="seconds a batch waits for each reply")
    canary.add_argument("--format", choices=["text", "json"], default="text")

    from console.maintain import add_parser as maintain_parser

    maintain_parser(commands)

    report = commands.add_parser("report", help="a month's losses per loss objective, stream and publisher, from the "
                                                "analytics tables (History's numbers): Markdown, or HTML with plots")
    add_flags(report, "data")
    report.add_argument("--month", help="YYYY-MM (default: this month, UTC)")
    report.add_argument("--format", choices=["markdown", "html"], default="markdown")
    report.add_argument("--output", help="a file to write it to (default: standard output)")

    search = commands.add_parser("search", help="search any stream, bounded: a subject filter and a window the server "
                                                "applies, a CEL predicate over headers and payload; matches as JSON "
                                                "lines, progress on stderr")
    add_flags(search, *WITH_EVENT_LOG, "access.roles", "access.local_role")
    search.add_argument("stream", help="the stream to search")
    search.add_argument("--subject", help="a subject filter (wildcards), applied by the server")
    search.add_argument("--from-seq", type=int, help="the first stream sequence")
    search.add_argument("--to-seq", type=int, help="the last stream sequence")
    search.add_argument("--since", help="from this time (ISO 8601 with a zone)")
    search.add_argument("--until", help="to this time (ISO 8601 with a zone)")
    search.add_argument("--where", help='a CEL expression over subject, seq, time, headers, size, text, payload '
                                        '(e.g. \'payload.amount > 100 && headers["kind"] == "refund"\')')
    search.add_argument("--newest-first", action="store_true", help="read from the end backwards")
    search.add_argument("--max-scanned", type=int, default=1_000_000, help="messages read at most")
    search.add_argument("--max-bytes", type=int, default=1 << 30, help="payload bytes read at most")
    search.add_argument("--max-matches", type=int, default=1000, help="matches at most")
    search.add_argument("--max-seconds", type=float, default=60.0, help="seconds at most")
    search.add_argument("--output", help="export the matches to this file, streamed (memory flat whatever the size)")
    search.add_argument("--format", choices=list(FORMATS), default="jsonl",
                        help="the export's format (with --output)")

    probe = commands.add_parser("probe", help="publish test batches and report what happened")
    probe.add_argument("kind", choices=["atomic", "fast"])
    add_flags(probe, *CONNECTED, "access.roles", "access.local_role")
    test = probe.add_argument_group("the test (arguments of one run: no environment twins)")
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
    test.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def cmd_server(settings: Settings) -> int:
    e = settings.embedded
    limits = BatchLimits(timeout=e.nats_batch_timeout, max_msgs=e.nats_batch_max_msgs)
    store = settings.data.data_dir / "nats"
    if e.nats_nodes > 1:
        ports = [e.nats_port + i if e.nats_port else 0 for i in range(e.nats_nodes)]
        server = EmbeddedCluster(store, e.nats_nodes, host=e.nats_host, ports=ports, batch_limits=limits)
    else:
        server = EmbeddedServer(store, host=e.nats_host, port=e.nats_port, batch_limits=limits,
                                extra_config=system_account(store))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.start()
    monitor_url = getattr(server, "monitor_url", None)  # a single server's is known once it runs
    where = f"{e.nats_nodes} nodes, stores {store}/n*" if e.nats_nodes > 1 else f"monitor {monitor_url}, store {store}"
    ready = private_file(store / SERVER_READY)  # what `up` reads: the server's own URLs, not its log
    ready.write_text(json.dumps({"url": server.url, "monitor_url": monitor_url}))
    try:
        print(f"nats-server ready on {server.url} ({where})", flush=True)
        print(f"try: batch-console probe fast --server {server.url} --json", flush=True)
        code = server.wait()
        log.error("nats-server exited with %s; see its log under %s", code, store)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        ready.unlink(missing_ok=True)
        server.stop()


def system_account(store: Path) -> str:
    """The embedded server's accounts: every client without credentials in the global account as before
    (its streams where they were), and a system account whose user (its password made once, 0600, in the
    store) `up` gives the collector: identity, the advisories no client can forge, the server's limits."""
    private_dir(store)
    path = store / SYSTEM_PASSWORD_FILE
    if not path.exists():
        private_file(path).write_text(secrets.token_urlsafe(24))
    password = path.read_text().strip()
    return "\n".join([
        # what a client without credentials is; its password unused (a new one each start)
        f'authorization {{ users: [ {{user: "batch-console", password: {json.dumps(secrets.token_urlsafe(24))}}} ] }}',
        "no_auth_user: batch-console",
        f"accounts {{ SYS {{ users: [ {{user: {json.dumps(EMBEDDED_SYSTEM_USER)}, password: {json.dumps(password)}}} ] }} }}",
        "system_account: SYS"])


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    return stop


async def demo_async(settings: Settings) -> int:
    from console.demo import DEMO_CLIENT, run_demo

    stop = stop_on_signals()  # its connection says what it is wherever a publisher is named: its faults are meant
    named = replace(settings, connection=replace(settings.connection, name=DEMO_CLIENT))
    async with await Runtime.open(named) as runtime:
        async def first_round_seen() -> int:
            await collector_reading(runtime, stop)  # round 1's losses are the collector's to see, as every other's
            return await run_demo(runtime.nc, every=settings.demo.demo_every, rounds=settings.demo.demo_rounds)

        demo = asyncio.create_task(first_round_seen())
        await asyncio.wait([demo, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        await cancelled(demo)
    if not demo.cancelled() and demo.exception():
        raise demo.exception()
    return 0


COLLECTOR_WAIT = 120.0  # seconds the demo waits for a collector to say it is reading before it publishes anyway


async def collector_reading(runtime: Runtime, stop: asyncio.Event) -> None:
    """Until a collector has written a status since this was asked: a collector writes its first status once
    every tap and the advisory reader are in place, so what is published after it is seen. Published before
    it (as `up --demo` did), round 1's losses appeared nowhere. After COLLECTOR_WAIT, said, and on."""
    from console.broker.eventlog import EventLog
    from console.domain.events import EventKind

    since = datetime.now(timezone.utc)
    log_ = EventLog.over(runtime.nc, runtime.event_log)
    deadline = time.monotonic() + COLLECTOR_WAIT
    while not stop.is_set():
        try:
            found = await log_.window(since, datetime.now(timezone.utc) + timedelta(seconds=5),
                                      kind_filter=f"{EventKind.COLLECTOR_STATUS.value}.>", idle_timeout=0.5)
        except Exception as e:  # noqa: BLE001  # no event log yet (the collector makes it): looked at again
            log.debug("no collector status read yet: %s", e)
            found = []
        if found:
            log.info("the collector is reading: the demo starts")
            return
        if time.monotonic() > deadline:
            log.warning("no collector status in %gs: the demo starts without one (its losses may go unseen)",
                        COLLECTOR_WAIT)
            return
        await asyncio.sleep(0.5)


async def probe_async(settings: Settings, args: argparse.Namespace) -> int:
    options = ProbeOptions(
        kind=args.kind, stream=args.stream, subject=args.subject, count=args.count, size=args.size,
        batch_size=args.batch_size, eob=args.eob, flow=args.flow, max_outstanding_acks=args.max_outstanding_acks,
        gap_mode=GapMode(args.gap_mode), skip_seq=args.skip_seq, abandon=args.abandon, timeout=args.timeout,
    )
    bar = ProgressBar(options.count, f"{options.kind} probe")
    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  allow_reconnect=False) as runtime:
        try:
            report = await runtime.run_probe(runtime.actions(CLI), options, bar.update)
        finally:
            bar.close()
    print(json.dumps(report.to_json()) if args.json else report.text())
    injected = options.skip_seq is not None or options.abandon
    return 1 if report.error and not injected else 0


async def canary_async(settings: Settings, args: argparse.Namespace) -> int:
    from console.broker.eventlog import EventLog
    from console.canary import CanaryOptions, as_json_lines, as_text
    from console.commands import RunCanary

    if not 3 <= args.messages <= 1000 or not 0.1 <= args.timeout <= 60 or not 1 <= args.every <= 86_400:
        raise ConfigError("--messages is 3 to 1000, --timeout 0.1 to 60 s, --every 1 s to a day")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def one(each: Settings) -> list:
        """One system's canary, into its own event log; a system not reached is said, the others go on."""
        options = CanaryOptions(each.fleet.name, args.messages, args.timeout, args.every, args.once)
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


def canary_exit(results: list, reached: bool) -> int:
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
    from console.queries.sight import Sight

    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout) as runtime:
        whole = await runtime.audit.read(start)
        # its records as the local role is shown them (the chain's verdict is the whole trail's)
        checked = Sight(runtime.actions(CLI).grants).audit(whole)
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


async def collect_async(settings: Settings) -> int:
    """One system's collector, or, with a systems file, one per system in this process: each writes into
    its own system's event log (README: "Where the console's own streams live in a fleet"); a system that
    cannot be reached is tried again, and the others collect meanwhile."""
    stop = stop_on_signals()
    systems = settings.systems()
    if not systems:
        await _collect_one(settings, stop, "")
    else:
        if settings.collector.cpu == "adaptive":  # one collector's idle class would slow the others down
            log.info("several systems: the collectors run at nice 10 (--cpu low), not in the idle class by turns")
            settings = replace(settings, collector=replace(settings.collector, cpu="low"))
        await asyncio.gather(*(_collect_kept(settings.of_system(s), stop, f"system {s.name}: ") for s in systems))
    log.info("collector stopped")
    return 0


async def _opened(settings: Settings, stop: asyncio.Event, said: str, retry: bool, **options) -> Runtime | None:
    """A runtime on the settings' system; with `retry` (one of several systems), one that cannot be reached
    is said and tried again, with a growing pause up to 30 s, until it opens (None: stopped meanwhile)."""
    from console.errors import NatsUnreachableError

    wait = 1.0
    while True:
        try:
            return await Runtime.open(settings, give_up_after=settings.connection.connect_timeout if retry else 30.0,
                                      **options)
        except NatsUnreachableError as e:
            if not retry:
                raise
            log.warning("%snot reachable (%s): trying again in %gs; the other systems go on meanwhile", said, e, wait)
            try:
                await asyncio.wait_for(stop.wait(), wait)
                return None
            except asyncio.TimeoutError:
                wait = min(wait * 2, 30.0)


async def _collect_kept(settings: Settings, stop: asyncio.Event, said: str) -> None:
    """One of several systems' collectors, started again (with a growing pause up to 30 s) whatever ended it:
    a server that takes the connection and then answers nothing, or nonsense, costs its own system alone."""
    wait = 1.0
    while not stop.is_set():
        started = time.monotonic()
        try:
            await _collect_one(settings, stop, said, retry=True)
        except Exception as e:  # noqa: BLE001  # any failure of one system's collector: the others go on
            if time.monotonic() - started > 60:
                wait = 1.0
            log.warning("%sthe collector stopped (%s): started again in %gs; the other systems go on meanwhile",
                        said, str(e)[:300] or type(e).__name__, wait)
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except asyncio.TimeoutError:
                wait = min(wait * 2, 30.0)


async def _collect_one(settings: Settings, stop: asyncio.Event, said: str, retry: bool = False) -> None:
    collector: Collector | None = None

    async def on_error(e: Exception) -> None:
        log.warning("%sNATS: %s", said, e)
        if collector is not None:
            collector.note_connection_error(e)

    runtime = await _opened(settings, stop, said, retry, system=True, writes_events=True, error_cb=on_error)
    if runtime is None:
        return
    async with runtime:
        c = settings.collector
        quarantine = QuarantineSettings(max_msgs=c.quarantine_max_msgs, per_second=c.quarantine_per_second,
                                        first_per_reason=c.quarantine_first_per_reason,
                                        first_max_msgs=c.quarantine_first_max_msgs, replicas=settings.event_log.replicas)
        collector = Collector(runtime.nc, c, runtime.event_log, system_nc=runtime.system_nc,
                              monitor_url=settings.connection.monitor_url, quarantine=quarantine,
                              open_tap=lambda servers: connect(replace(settings.connection, servers=tuple(servers)),
                                                               give_up_after=settings.connection.connect_timeout,
                                                               error_cb=on_error),
                              kept=KeptMessages(runtime.payloads()))
        await collector.start()
        gc.freeze()  # what started is kept for good: a full collection under a flood of replies need not walk it
        log.info("%scollecting into %s (advisories %s; batch timeout %gs, %s)", said, runtime.event_log.stream,
                 f"durable via {collector.advisory_stream}" if collector.advisories_durable else "LIVE ONLY",
                 collector.tracker.batch_timeout, collector.batch_timeout_source)
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), settings.collector.status_every)
                except asyncio.TimeoutError:
                    status = await collector.status()
                    log.info("%swritten %d, rejected %d, tracked %d, advisory lag %s%s", said, status.events_written,
                             status.rejected_total, status.batches_tracked, status.advisory_lag,
                             "" if status.healthy else f"; UNHEALTHY: {'; '.join(status.unhealthy)}")
        finally:
            await collector.stop()


async def alerts_async(settings: Settings) -> int:
    """The alerts part of one system, or, with a systems file, of each system in this process: each with
    its rules (those that cover it), its firing state and checks in its own console.db, and one /metrics
    whose samples carry their `system`."""
    from console.alerting.metrics import Metrics
    from console.alerting.rules_file import load_rules, rules_path

    path = rules_path(settings.alerting.rules, settings.data.data_dir)
    try:
        rules = load_rules(path, settings.notify_targets())
    except ValueError as e:  # RulesError: the line and the reason
        raise ConfigError(f"rules file {path}: {e}") from None
    wanted = settings.alerting.metrics_port is not None
    stop = stop_on_signals()
    systems = settings.systems()
    if not systems:
        await _alerts_one(settings, rules, Metrics() if wanted else None, stop)
        return 0
    each = {s.name: Metrics(s.name) for s in systems} if wanted else {}
    if wanted:
        _serve_metrics(lambda: list(each.values()), settings)
    await asyncio.gather(*(_alerts_one(settings.of_system(s), rules, each.get(s.name), stop, s.name, served=True)
                           for s in systems))
    return 0


def _serve_metrics(metrics, settings: Settings) -> None:
    from console.alerting.metrics import serve_metrics

    try:
        server = serve_metrics(metrics, settings.alerting.metrics_port, inherited=os.environ.get(METRICS_FD_ENV))
    except OSError as e:  # not NATS: the port is taken
        raise ConfigError(f"cannot serve /metrics on 127.0.0.1:{settings.alerting.metrics_port}: {e}") from None
    print(f"metrics on http://127.0.0.1:{server.server_port}/metrics", flush=True)


async def _alerts_one(settings: Settings, rules, metrics, stop: asyncio.Event, system: str = "",
                      served: bool = False) -> None:
    """One system's alerts. Of several systems, one that fails is started again on its own; the others
    go on (alone, a failure ends the process, and its supervisor starts it again)."""
    while True:
        try:
            await _alerts_run(settings, rules, metrics, stop, system, served)
            return
        except Exception as e:
            if not system or stop.is_set():
                raise
            log.error("system %s: alerts stopped (%s: %s); started again in %g s", system, type(e).__name__,
                      str(e)[:200], ALERTS_AGAIN)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), ALERTS_AGAIN)
            if stop.is_set():
                return


async def _alerts_run(settings: Settings, rules, metrics, stop: asyncio.Event, system: str, served: bool) -> None:
    from console.alerting.rules_file import rules_path
    from console.alerting.service import AlertService
    from console.checks import watch
    from console.storage.alert_state import AlertStore

    said = f"system {system}: " if system else ""
    runtime = await _opened(settings, stop, said, retry=bool(system), key_wait=KEY_WAIT, system=True)
    if runtime is None:
        return
    async with runtime:
        if metrics is not None and not served:
            _serve_metrics(metrics, settings)
        store = AlertStore(settings.data.db_path)
        service = AlertService(runtime.nc, runtime.event_log, rules, store, settings.alerting.console_url, metrics,
                               rules_file=lambda: rules_path(settings.alerting.rules, settings.data.data_dir),
                               targets=settings.notify_targets(),
                               checks_window_s=settings.checks.check_window * 60, system=system)
        log.info("%salerts: %d rules, firing state in %s", said, len(service.evaluator.rules), store.path)
        ended = asyncio.Event()  # this system's service and checks end together, the others' go on
        relay = asyncio.create_task(_relay(stop, ended))
        checks = asyncio.create_task(watch(runtime, settings, store, metrics, ended, service.set_findings,
                                           service.recent, lambda: service.caught_up, service.set_budgets),
                                     name=f"checks {system}")
        try:
            await service.run(ended)
        finally:
            ended.set()
            relay.cancel()
            await checks


async def _relay(stop: asyncio.Event, ended: asyncio.Event) -> None:
    await stop.wait()
    ended.set()


def backlog_progress(step: int):
    """A run's progress when it reads more than one step: a bar on a terminal, else a line a step."""
    bar: ProgressBar | None = None

    def shown(done: int, total: int) -> None:
        nonlocal bar
        if total <= step:
            return
        if sys.stderr.isatty():
            bar = bar or ProgressBar(total, "analytics: reading the event log")
            bar.update(done)
            if done >= total:
                bar.close()
        else:
            print(f"analytics: read {done:,} of {total:,} new event-log sequences", flush=True)

    return shown


async def _reachable(settings: Settings) -> None:
    await close(await connect(settings.connection, give_up_after=settings.connection.connect_timeout))


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


def cmd_analytics(settings: Settings, once: bool) -> int:
    """The analytics job on one system, or, with a systems file, on each in turn in one Spark session: each
    system's event log into its own console.db and delta/ (DATA_DIR/systems/NAME); one that cannot be
    reached is said, and the others run."""
    from console.analytics.follow import HEARTBEATS_DEFERRED, follow
    from console.analytics.ledger_tail import LedgerTail
    from console.broker.log_watcher import AnyOf, LogWatcher
    from console.analytics.job import JobSettings, run_once, spark_session  # PySpark loads only here
    from console.analytics.source import SourceOptions

    a = settings.analytics
    if a.master and a.remote:
        raise ConfigError("give --spark-master or --remote, not both")
    systems = {spec.name: settings.of_system(spec) for spec in settings.systems()}
    if not systems:
        asyncio.run(_reachable(settings))  # an unreachable server is said before a missing key is waited for
    objectives = Watched(settings.data.objectives, lambda: tuple(objectives_of(settings)))  # edited: the next run's
    objectives()  # a file with an error stops the job here, with its line
    jobs = {name: JobSettings(each.data.system_dir, SourceOptions.parse(spark_options(each)), max_events=a.max_events,
                              driver_reads_up_to=a.driver_reads_up_to, system=name)
            for name, each in (systems or {"": settings}).items()}
    spark = spark_session(a.master, remote=a.remote, keep_workers=a.keep_workers, driver_memory=a.driver_memory,
                          full_jit=a.full_jit)
    watchers: list[LogWatcher] = []
    tails: list[LedgerTail] = []
    warm = False  # a follow process's first Spark run warms its session (a cold run is ~3x slower)

    def run() -> None:
        nonlocal warm
        for name, job in jobs.items():
            said = f"analytics: system {name}: " if name else "analytics: "
            try:
                report = run_once(spark, dataclasses.replace(job, objectives=objectives()),  # as the file is now
                                  progress=backlog_progress(job.max_events),
                                  defer_heartbeats=HEARTBEATS_DEFERRED if a.follow and warm else 0)
            except Exception as e:  # of several systems, one not reached: the others run
                if not name:
                    raise
                print(f"{said}not run: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__}", flush=True)
                continue
            warm = warm or report.events_read > 0 or bool(report.skipped)
            print(f"{said}{report.line()}", flush=True)

    try:
        if once:
            run()
        elif a.follow:
            prefix = settings.event_log.subject_prefix
            # The collector's heartbeat changes no history: waking on it would run the job every gap.
            watchers = [LogWatcher(each.connection, f"{prefix}.>",
                                   quiet=(f"{prefix}.{EventKind.COLLECTOR_STATUS.value}.",)).start()
                        for each in (systems or {"": settings}).values()]
            tails = [LedgerTail(job.source, job.db_path).start() for job in jobs.values()]  # losses within seconds
            follow(run, watchers[0] if len(watchers) == 1 else AnyOf(watchers), every=a.every, gap=a.follow_gap)
        else:
            while True:
                run()
                time.sleep(a.every)  # the CLI's own loop: no event loop here
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for stoppable in (*watchers, *tails):
            stoppable.stop()
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings: Settings | None = None
    try:
        settings = load(args)
        if args.command not in ("up", "server"):  # a command beside a running `up` uses the URLs it chose
            settings = beside_up(settings)
        logging.basicConfig(level=logging.DEBUG if settings.log.verbose else logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request, with its URL as given
        redact_logs(settings)
        return run(args.command, settings, args)
    except ConsoleError as e:
        print(f"batch-console: {e}", file=sys.stderr)
        return 2
    except (OSError, asyncio.TimeoutError) as e:  # connection refused, unreachable, TLS
        where = settings.connection.describe() if settings else "the configured server"
        print(f"batch-console: cannot reach NATS at {where}: {e or type(e).__name__}", file=sys.stderr)
        return 2


def run(command: str, settings: Settings, args: argparse.Namespace) -> int:
    if command == "server":
        return cmd_server(settings)
    if command == "collect":
        return asyncio.run(collect_async(settings))
    if command == "analytics":
        return cmd_analytics(settings, args.once)
    if command == "alerts":
        return asyncio.run(alerts_async(settings))
    if command == "serve":
        from console.serve import serve  # Panel loads only here

        serve(settings)
        return 0
    if command == "up":
        from console.supervisor import Supervisor

        return Supervisor(settings).run()
    if command == "demo":
        return asyncio.run(demo_async(settings))
    if command == "audit":
        return asyncio.run(audit_async(settings, args.since, args.verify))
    if command == "token":
        return cmd_token(settings, args)
    if command == "mcp":
        from console.api.mcp_server import run as run_mcp

        run_mcp(args.api_url, os.environ.get("BATCH_CONSOLE_API_TOKEN", ""), args.writes)  # a token is never on a command line
        return 0
    if command == "check":
        from console.checks import run_check

        return asyncio.run(run_check(settings, args.format, args.code, args.stream))
    if command == "search":
        from console.search import run_search

        return asyncio.run(run_search(settings, args))
    if command == "canary":
        return asyncio.run(canary_async(settings, args))
    if command == "maintain":
        from console.maintain import run_maintain

        return asyncio.run(run_maintain(settings, args))
    if command == "report":
        from console.report import run_report

        return run_report(settings, args.month, args.format, args.output)
    if command == "conformance":
        from console.conformance import run_conformance

        return asyncio.run(run_conformance(settings, args.format, args.window))
    return asyncio.run(probe_async(settings, args))


if __name__ == "__main__":
    sys.exit(main())
