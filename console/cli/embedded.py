"""The processes of the embedded default: the nats-server, the web console, `up` (all of it under one
supervisor) and the demo's traffic."""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import signal
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from console.broker.cluster import EmbeddedCluster
from console.broker.connection import cancelled
from console.broker.server import BatchLimits, EmbeddedServer
from console.cli.base import CONNECTED, WITH_EVENT_LOG, Subcommand, log, stop_on_signals
from console.config import (EMBEDDED_SYSTEM_USER, SERVER_READY, SYSTEM_PASSWORD_FILE, UP_ANALYTICS_EVERY, UP_DRIVER_MEMORY,
                            Settings, private_dir, private_file)
from console.runtime import Runtime


class Server(Subcommand):
    name, help = "server", "run the embedded nats-server in the foreground"
    settings, beside_up = ("data", "embedded"), False
    aliases = {"--nats-host": "--host", "--nats-port": "--port", "--nats-batch-timeout": "--batch-timeout",
               "--nats-batch-max-msgs": "--batch-max-msgs"}

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return cmd_server(settings)


class Serve(Subcommand):
    name, help = "serve", "the web console (Panel)"
    settings = (*WITH_EVENT_LOG, "web", "access", "alerting.console_url", "fleet")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.serve import serve  # Panel loads only here

        serve(settings)
        return 0


class Up(Subcommand):
    name = "up"
    help = "the whole console under one supervisor (the embedded nats-server unless --server names an existing NATS)"
    settings = (*WITH_EVENT_LOG, "system", "collector", "analytics", "web", "access", "embedded", "demo", "alerting",
                "checks", "fleet")
    # Following the log, a loss wakes the analytics part at once; the rest (clean batches, canaries, heartbeats)
    # waits for its timer: every 5 minutes keeps a quiet log's Spark runs under 0.05 cores (bench/lag.py --mode quiet)
    defaults = {"analytics.follow": True, "analytics.driver_memory": UP_DRIVER_MEMORY, "analytics.every": UP_ANALYTICS_EVERY}
    beside_up = False

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        from console.supervisor import Supervisor

        return Supervisor(settings).run()


class Demo(Subcommand):
    name, help = "demo", "demo traffic: every batch outcome, on demo streams it creates"
    settings = (*CONNECTED, "demo.demo_every", "demo.demo_rounds")
    aliases = {"--demo-every": "--every", "--demo-rounds": "--rounds"}

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(demo_async(settings))


# By default the console's own server acknowledges a commit once it is on disk (BATCH_025): what it shows
# of durability is what it does (about 0.4 ms a write more on these machines; --nats-sync default for less).
SYNC = {"always": "sync_interval: always", "default": ""}


def cmd_server(settings: Settings) -> int:
    e = settings.embedded
    limits = BatchLimits(timeout=e.nats_batch_timeout, max_msgs=e.nats_batch_max_msgs)
    store = settings.data.data_dir / "nats"
    server: EmbeddedCluster | EmbeddedServer
    if e.nats_nodes > 1:
        ports = [e.nats_port + i if e.nats_port else 0 for i in range(e.nats_nodes)]
        server = EmbeddedCluster(store, e.nats_nodes, host=e.nats_host, ports=ports, batch_limits=limits,
                                 jetstream_config=SYNC[e.nats_sync])
    else:
        server = EmbeddedServer(store, host=e.nats_host, port=e.nats_port, batch_limits=limits,
                                extra_config=system_account(store), jetstream_config=SYNC[e.nats_sync])
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
    if not demo.cancelled() and (failed := demo.exception()) is not None:
        raise failed
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
