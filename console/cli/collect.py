"""`batch-console collect`: the collector of one system, or of each system of a systems file."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
from dataclasses import replace

from console.backoff import Backoff, keep_trying
from console.broker.connection import connect
from console.broker.quarantine import QuarantineSettings
from console.cli.base import WITH_EVENT_LOG, Subcommand, log, opened, stop_on_signals
from console.collector.collector import Collector
from console.collector.kept import KeptMessages
from console.config import Settings


STOP_WITHIN = 45.0  # seconds a system's collector is given to stop once asked (it stores what it holds)


class Collect(Subcommand):
    name, help = "collect", "capture batch advisories and the $FI tap into the event log"
    settings = (*WITH_EVENT_LOG, "system", "collector", "fleet")
    defaults = {"collector.cpu": "adaptive", "collector.pace_ms": 10.0}

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(collect_async(settings))


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
        kept = {s.name: asyncio.create_task(_collect_kept(settings.of_system(s), stop, f"system {s.name}: "))
                for s in systems}
        await stop.wait()
        _, stuck = await asyncio.wait(kept.values(), timeout=STOP_WITHIN)
        if stuck:  # a server gone while its connection was being made: its nats-py reconnects for ever
            names = ", ".join(name for name, task in kept.items() if task in stuck)
            log.error("stopping: system(s) %s did not stop within %gs; the others stopped, this process ends",
                      names, STOP_WITHIN)
            logging.shutdown()
            os._exit(1)
    log.info("collector stopped")
    return 0


async def _collect_kept(settings: Settings, stop: asyncio.Event, said: str) -> None:
    """One of several systems' collectors, started again (with a growing pause up to 30 s) whatever ended it:
    a server that takes the connection and then answers nothing, or nonsense, costs its own system alone."""
    backoff = Backoff(first=1.0, most=30.0, stable_after=60.0)  # a collector that ran a minute starts over
    await keep_trying(lambda: _collect_one(settings, stop, said, retry=True), backoff, Exception,
                      lambda e, wait: log.warning("%sthe collector stopped (%s): started again in %gs; the other "
                                                  "systems go on meanwhile", said, str(e)[:300] or type(e).__name__,
                                                  wait), stop)


async def _collect_one(settings: Settings, stop: asyncio.Event, said: str, retry: bool = False) -> None:
    collector: Collector | None = None

    async def on_error(e: Exception) -> None:
        log.warning("%sNATS: %s", said, e)
        if collector is not None:
            collector.note_connection_error(e)

    runtime = await opened(settings, stop, said, retry, system=True, writes_events=True, error_cb=on_error)
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
