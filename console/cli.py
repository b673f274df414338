"""`batch-console`: the entry point and composition root."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from console.broker.connection import connect
from console.broker.eventlog import DAY, EventLogSettings
from console.broker.server import BatchLimits, EmbeddedServer
from console.collector.collector import Collector, CollectorSettings
from console.collector.priority import CpuMode
from console.config import DEFAULT_SERVER, ConnectionSettings, event_key, split_userinfo
from console.domain.fast_ingest import GapMode
from console.errors import ConsoleError
from console.probe import ProbeOptions, run_probe
from console.progress import ProgressBar

log = logging.getLogger("batch-console")


def add_connection_flags(parser: argparse.ArgumentParser, server_default: str | None = DEFAULT_SERVER,
                         server_help: str = "NATS URL, or several separated by commas (default %(default)s)") -> None:
    group = parser.add_argument_group("connection (secrets may also come from BATCH_CONSOLE_TOKEN / _PASSWORD)")
    group.add_argument("--server", default=os.environ.get("BATCH_CONSOLE_SERVER", server_default), help=server_help)
    group.add_argument("--creds", help="user credentials file (JWT + nkey seed)")
    group.add_argument("--nkey", help="nkey seed file")
    group.add_argument("--token", default=os.environ.get("BATCH_CONSOLE_TOKEN"), help="auth token")
    group.add_argument("--user", help="user name")
    group.add_argument("--password", default=os.environ.get("BATCH_CONSOLE_PASSWORD"), help="password")
    group.add_argument("--tls-ca", help="CA certificate file")
    group.add_argument("--tls-cert", help="client certificate file")
    group.add_argument("--tls-key", help="client key file")


def add_event_key_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--event-key-file", default=os.environ.get("BATCH_CONSOLE_EVENT_KEY_FILE"),
                        help="the key that signs the event log (default: $BATCH_CONSOLE_EVENT_KEY, "
                             "else DATA_DIR/event.key, made when missing)")


def event_log_settings(args: argparse.Namespace, **settings) -> EventLogSettings:
    return EventLogSettings(key=event_key(args.event_key_file, args.data_dir), **settings)


FILE_FLAGS = ("creds", "nkey", "user", "tls_ca", "tls_cert", "tls_key")


def forwarded_connection(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The connection flags for child processes: file paths as flags, secrets as environment
    variables (never on a command line, where `ps` shows them)."""
    argv = [x for name in FILE_FLAGS if getattr(args, name) for x in (f"--{name.replace('_', '-')}", getattr(args, name))]
    env = {k: v for k, v in (("BATCH_CONSOLE_TOKEN", args.token), ("BATCH_CONSOLE_PASSWORD", args.password)) if v}
    return argv, env


def connection_settings(args: argparse.Namespace) -> ConnectionSettings:
    return ConnectionSettings(
        servers=tuple(s.strip() for s in args.server.split(",") if s.strip()),
        creds_file=args.creds,
        nkey_seed_file=args.nkey,
        token=args.token,
        user=args.user,
        password=args.password,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batch-console", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    server = commands.add_parser("server", help="run the embedded nats-server in the foreground")
    server.add_argument("--data-dir", default="data", help="its store goes in DATA_DIR/nats (default %(default)s)")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=4222, help="0 picks a free port")
    server.add_argument("--batch-timeout", type=float, help="seconds an idle batch is kept (server default 10)")
    server.add_argument("--batch-max-msgs", type=int, help="atomic messages per batch (server default 1000)")

    collect = commands.add_parser("collect", help="capture batch advisories and the $FI tap into the event log")
    add_connection_flags(collect)
    collect.add_argument("--inbox-prefix", action="append", dest="inbox_prefixes",
                         help="reply prefix to tap for fast batches (repeatable; default _INBOX)")
    collect.add_argument("--batch-timeout", type=float,
                         help="the server's batch timeout (a fast batch silent longer is inferred dropped);"
                              " default: learned from /varz, else 10")
    collect.add_argument("--monitor-url", help="the server's monitoring URL, to learn its batch limits")
    collect.add_argument("--tap-publish-side", action="append", dest="publish_subjects", metavar="SUBJECT",
                         help="also tap fast-batch messages published on SUBJECT (repeatable; as heavy as the data)")
    system = collect.add_argument_group("system account (optional: its copies of advisories, /varz)")
    system.add_argument("--system-creds", help="creds file of a system account user")
    system.add_argument("--system-user")
    system.add_argument("--system-password", default=os.environ.get("BATCH_CONSOLE_SYSTEM_PASSWORD"))
    collect.add_argument("--cpu", choices=[m.value for m in CpuMode], default=CpuMode.ADAPTIVE.value,
                         help="adaptive (default): nice 10, and Linux's idle scheduling class while the collector"
                              " keeps up, so publishers on the same cores keep their speed; low: nice 10 only;"
                              " normal: as any process")
    collect.add_argument("--pace-ms", type=float, default=10.0,
                         help="pause between passes while tap traffic flows, so one read takes many acks (0: off)")
    collect.add_argument("--data-dir", default="data", help="where the event key is kept (default %(default)s)")
    add_event_key_flag(collect)
    collect.add_argument("--events-stream", default="BATCH_CONSOLE_EVENTS")
    collect.add_argument("--events-max-age-days", type=float, default=30.0)

    analytics = commands.add_parser("analytics", help="keep abandonment and gap history in SQLite and Delta (PySpark)")
    add_connection_flags(analytics)
    analytics.add_argument("--data-dir", default="data", help="console.db and delta/ go here (default %(default)s)")
    when = analytics.add_mutually_exclusive_group(required=True)
    when.add_argument("--once", action="store_true", help="one run, then exit")
    when.add_argument("--every", type=float, metavar="SECONDS", help="a run every SECONDS until Ctrl-C")
    analytics.add_argument("--master", help="Spark master URL (default: spark-submit's, else local)")
    add_event_key_flag(analytics)
    analytics.add_argument("--events-stream", default="BATCH_CONSOLE_EVENTS")
    analytics.add_argument("--partitions", type=int, default=2, help="parallel reads of the event log")

    serve = commands.add_parser("serve", help="the web console (Panel)")
    add_connection_flags(serve)
    serve.add_argument("--address", default="127.0.0.1", help="bind address (default %(default)s)")
    serve.add_argument("--port", type=int, default=8050)
    serve.add_argument("--basic-auth", default=os.environ.get("BATCH_CONSOLE_BASIC_AUTH"),
                       help="a password, or a JSON file of user: password; required off loopback")
    serve.add_argument("--insecure", action="store_true", help="serve off loopback without authentication")
    serve.add_argument("--read-only", action="store_true", help="hide and refuse every action that changes the server")
    serve.add_argument("--data-dir", default="data", help="the analytics job's console.db is read here (default %(default)s)")
    add_event_key_flag(serve)

    up = commands.add_parser("up", help="the whole console under one supervisor (embedded nats-server without --server)")
    add_connection_flags(up, None, "an existing NATS, with the credentials below; without it the embedded nats-server runs")
    up.add_argument("--data-dir", default="data", help="server store, console.db, delta/ and logs/ (default %(default)s)")
    up.add_argument("--port", type=int, default=8050, help="the web console's port (default %(default)s)")
    up.add_argument("--nats-port", type=int, default=4222, help="the embedded nats-server's port (default %(default)s)")
    up.add_argument("--demo", action="store_true", help="publish demo traffic on demo streams of its own")
    up.add_argument("--analytics-every", type=float, default=60.0, help="seconds between analytics runs")
    add_event_key_flag(up)

    demo = commands.add_parser("demo", help="demo traffic: every batch outcome, on demo streams it creates")
    add_connection_flags(demo)
    demo.add_argument("--every", type=float, default=30.0, help="seconds between rounds (default %(default)s)")
    demo.add_argument("--rounds", type=int, help="stop after N rounds (default: until Ctrl-C)")

    probe = commands.add_parser("probe", help="publish test batches and report what happened")
    probe.add_argument("kind", choices=["atomic", "fast"])
    add_connection_flags(probe)
    probe.add_argument("--stream", default="BATCH_PROBE", help="created with the needed flag when missing")
    probe.add_argument("--subject", default="batch_probe.test")
    probe.add_argument("--count", type=int, default=1000, help="messages in all")
    probe.add_argument("--size", type=int, default=128, help="payload bytes")
    probe.add_argument("--batch-size", type=int, default=100, help="atomic: messages per batch")
    probe.add_argument("--eob", action="store_true", help="atomic: commit with an end-of-batch marker")
    probe.add_argument("--flow", type=int, default=100, help="fast: acks requested every N messages")
    probe.add_argument("--max-outstanding-acks", type=int, default=2, choices=[1, 2, 3])
    probe.add_argument("--gap-mode", choices=[m.value for m in GapMode], default=GapMode.FAIL.value)
    probe.add_argument("--skip-seq", type=int, help="never send this batch sequence (inject a gap)")
    probe.add_argument("--abandon", action="store_true", help="stop before the commit (the server abandons it)")
    probe.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
    probe.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def cmd_server(args: argparse.Namespace) -> int:
    limits = BatchLimits(timeout=args.batch_timeout, max_msgs=args.batch_max_msgs)
    server = EmbeddedServer(Path(args.data_dir) / "nats", host=args.host, port=args.port, batch_limits=limits)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.start()
    try:
        print(f"nats-server ready on {server.url} (monitor {server.monitor_url}, store {server.store_dir})", flush=True)
        print(f"try: batch-console probe fast --server {server.url} --json", flush=True)
        code = server.wait()
        log.error("nats-server exited with %s; see %s", code, server.log_path)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


async def demo_async(args: argparse.Namespace) -> int:
    from console.demo import run_demo

    nc = await connect(connection_settings(args), give_up_after=30)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    demo = asyncio.create_task(run_demo(nc, every=args.every, rounds=args.rounds))
    await asyncio.wait([demo, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    demo.cancel()
    await asyncio.wait([demo])
    await nc.close()
    if not demo.cancelled() and demo.exception():
        raise demo.exception()
    return 0


async def probe_async(args: argparse.Namespace) -> int:
    options = ProbeOptions(
        kind=args.kind, stream=args.stream, subject=args.subject, count=args.count, size=args.size,
        batch_size=args.batch_size, eob=args.eob, flow=args.flow, max_outstanding_acks=args.max_outstanding_acks,
        gap_mode=GapMode(args.gap_mode), skip_seq=args.skip_seq, abandon=args.abandon, timeout=args.timeout,
    )
    settings = connection_settings(args)
    nc = await connect(settings, give_up_after=settings.connect_timeout, allow_reconnect=False)
    bar = ProgressBar(options.count, f"{options.kind} probe")
    try:
        report = await run_probe(nc, options, bar.update)
    finally:
        bar.close()
        await nc.close()
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(format_report(report.to_json()))
    injected = options.skip_seq is not None or options.abandon
    return 1 if report.error and not injected else 0


async def collect_async(args: argparse.Namespace) -> int:
    settings = CollectorSettings(
        inbox_prefixes=tuple(args.inbox_prefixes or ("_INBOX",)),
        batch_timeout=args.batch_timeout,
        monitor_url=args.monitor_url,
        tap_publish_subjects=tuple(args.publish_subjects or ()),
        pace=args.pace_ms / 1000,
        cpu=CpuMode(args.cpu),
        event_log=event_log_settings(args, stream=args.events_stream, max_age=args.events_max_age_days * DAY),
    )
    collector: Collector | None = None

    async def on_error(e: Exception) -> None:
        log.warning("NATS: %s", e)
        if collector is not None:
            collector.note_connection_error(e)

    base = connection_settings(args)
    nc = await connect(base, give_up_after=30, error_cb=on_error)
    system_nc = None
    if args.system_creds or args.system_user:
        system = replace(base, name="batch-console-system", creds_file=args.system_creds, user=args.system_user,
                         password=args.system_password, token=None, nkey_seed_file=None)
        system_nc = await connect(system, give_up_after=30, error_cb=on_error)
    collector = Collector(nc, settings, system_nc=system_nc)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await collector.start()
    log.info("collecting into %s (advisories %s; batch timeout %gs, %s)", settings.event_log.stream,
             f"durable via {collector.advisory_stream}" if collector.advisories_durable else "LIVE ONLY",
             collector.tracker.batch_timeout, collector.batch_timeout_source)
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), settings.status_every)
            except asyncio.TimeoutError:
                status = await collector.status()
                log.info("written %d, rejected %d, tracked %d, advisory lag %s%s", status.events_written,
                         status.rejected_total, status.batches_tracked, status.advisory_lag,
                         "" if status.healthy else f"; UNHEALTHY: {'; '.join(status.unhealthy)}")
    finally:
        await collector.stop()
        await nc.close()
        if system_nc is not None:
            await system_nc.close()
    log.info("collector stopped")
    return 0


def source_options(args: argparse.Namespace) -> dict:
    """The jetstream data source's options; Spark redacts password/token values in its plans."""
    options = {"servers": args.server, "stream": args.events_stream, "partitions": str(args.partitions),
               "event_secret": event_key(args.event_key_file, args.data_dir).decode()}
    for key in ("creds", "nkey", "token", "user", "password", "tls_ca", "tls_cert", "tls_key"):
        if getattr(args, key, None):
            options[key] = getattr(args, key)
    return options


def cmd_analytics(args: argparse.Namespace) -> int:
    from console.analytics.job import JobSettings, run_once, spark_session  # PySpark loads only here

    settings = JobSettings(Path(args.data_dir), source=source_options(args))
    spark = spark_session(args.master)
    spark.sparkContext.setLogLevel("WARN")
    try:
        while True:
            report = run_once(spark, settings)
            print(f"analytics: {report.line()}", flush=True)
            if args.once:
                return 0
            time.sleep(args.every)  # the CLI's own loop: no event loop here
    except KeyboardInterrupt:
        return 0
    finally:
        spark.stop()


def format_report(report: dict) -> str:
    lines = [f"{report['kind']} probe on {report['stream']} ({report['subject']}):"
             f" {report['messages_sent']} messages in {report['seconds']:.3f}s ({report['msgs_per_s']:,.0f}/s)"]
    if report["puback"]:
        lines.append(f"  last PubAck: {report['puback']}")
    for gap in report["gaps"]:
        lines.append(f"  gap: lost {gap['lost']} from seq {gap['first_lost_seq']} (seen at {gap['seq']})")
    for err in report["errors"]:
        lines.append(f"  error at seq {err['seq']}: [{err['err_code']}] {err['description']}")
    if report["abandoned_batch"]:
        lines.append(f"  left open on purpose: {report['abandoned_batch']}")
    if report["error"]:
        lines.append(f"  error: {report['error']['message']}")
    return "\n".join(lines)


def lift_url_secrets(args: argparse.Namespace) -> None:
    """Credentials written into a server URL become the credential flags, and the URL loses them, so
    no log line, status or child command line ever carries them."""
    if not getattr(args, "server", None):
        return
    servers = []
    for url in (s.strip() for s in args.server.split(",") if s.strip()):
        clean, user, secret = split_userinfo(url)
        servers.append(clean)
        if user and secret:
            args.user, args.password = args.user or user, args.password or secret
        elif secret:
            args.token = args.token or secret
    args.server = ",".join(servers)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lift_url_secrets(args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "server":
            return cmd_server(args)
        if args.command == "collect":
            return asyncio.run(collect_async(args))
        if args.command == "analytics":
            return cmd_analytics(args)
        if args.command == "serve":
            from console.serve import serve  # Panel loads only here

            serve(connection_settings(args), address=args.address, port=args.port, data_dir=Path(args.data_dir),
                  basic_auth=args.basic_auth, insecure=args.insecure, read_only=args.read_only,
                  event_log=event_log_settings(args))
            return 0
        if args.command == "up":
            from console.supervisor import Supervisor, UpOptions

            connection_argv, secrets = forwarded_connection(args)
            return Supervisor(UpOptions(Path(args.data_dir), args.server, args.port, args.nats_port, args.demo,
                                        args.analytics_every, tuple(connection_argv), args.event_key_file),
                              secrets).run()
        if args.command == "demo":
            return asyncio.run(demo_async(args))
        return asyncio.run(probe_async(args))
    except ConsoleError as e:
        print(f"batch-console: {e}", file=sys.stderr)
        return 2
    except (OSError, asyncio.TimeoutError) as e:  # connection refused, unreachable, TLS
        where = getattr(args, "server", None) or "the configured server"
        print(f"batch-console: cannot reach NATS at {where}: {e or type(e).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
