"""`batch-console alerts`: alert rules, health checks and budgets over the event log, with /metrics."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from typing import Any

from console.cli.base import WITH_EVENT_LOG, Subcommand, log, opened, stop_on_signals
from console.config import KEY_WAIT, METRICS_FD_ENV, Settings
from console.errors import ConfigError

ALERTS_AGAIN = 5.0  # seconds before one system's alerts that failed are started again (of several)


class Alerts(Subcommand):
    name, help = "alerts", "alert rules over the event log: notifications and Prometheus metrics"
    settings = (*WITH_EVENT_LOG, "alerting", "checks", "system", "fleet", "collector.domains")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return asyncio.run(alerts_async(settings))


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


def _serve_metrics(metrics: Any, settings: Settings) -> None:
    from console.alerting.metrics import serve_metrics

    port = settings.alerting.metrics_port
    assert port is not None, "served only when a port is given"
    try:
        server = serve_metrics(metrics, port, inherited=os.environ.get(METRICS_FD_ENV))
    except OSError as e:  # not NATS: the port is taken
        raise ConfigError(f"cannot serve /metrics on 127.0.0.1:{settings.alerting.metrics_port}: {e}") from None
    print(f"metrics on http://127.0.0.1:{server.server_port}/metrics", flush=True)


async def _alerts_one(settings: Settings, rules: Any, metrics: Any, stop: asyncio.Event, system: str = "",
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


async def _alerts_run(settings: Settings, rules: Any, metrics: Any, stop: asyncio.Event, system: str,
                      served: bool) -> None:
    from console.alerting.rules_file import rules_path
    from console.alerting.service import AlertService
    from console.broker.eventlog import EventLog
    from console.checks import watch
    from console.manifests import ManifestKeeper
    from console.storage.alert_state import AlertStore

    said = f"system {system}: " if system else ""
    runtime = await opened(settings, stop, said, retry=bool(system), key_wait=KEY_WAIT, system=True)
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
                                           service.recent, lambda: service.caught_up, service.set_budgets,
                                           service.set_consumers),
                                     name=f"checks {system}")
        keeper = asyncio.create_task(ManifestKeeper(runtime.nc, EventLog.over(runtime.nc, runtime.event_log)).run(ended),
                                     name=f"manifests {system}")
        try:
            await service.run(ended)
        finally:
            ended.set()
            relay.cancel()
            await checks
            await keeper


async def _relay(stop: asyncio.Event, ended: asyncio.Event) -> None:
    await stop.wait()
    ended.set()
