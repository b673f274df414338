"""`batch-console check`: the catalogue (console/domain/checks.py) over what the console can read,
printed for a person (text), a program (json), Nagios (its exit codes and perfdata) or Prometheus.

What is read, whatever the number of streams: one stream listing, the server's /varz (through the
system account or the monitor URL), `$JS.API.INFO`, and the event log's window (one ordered read).
What cannot be read leaves the checks that need it unchecked, and says so."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from console.alerting.metrics import Family, Metrics
from console.alerting.rules_file import remedies
from console.broker.admin import StreamAdmin
from console.config import Settings, open_to_others
from console.domain.checks import (
    CHECKS, SEVERITIES, Facts, Finding, RecentEvents, Report, StreamFacts, parse_threshold, window_counts,
)
from console.domain.canary import CanaryResult, canary_result
from console.domain.events import EventKind
from console.domain.node_stops import stops_outside
from console.domain.publisher import NO_SYSTEM_ACCOUNT
from console.domain.status import CollectorStatus
from console.domain.conformance import Verdicts
from console.domain.wire import MalformedInput
from console.runtime import Runtime
from console.system import ASSUMED

log = logging.getLogger(__name__)
NAGIOS = {"ok": 0, "info": 0, "warning": 1, "critical": 2}
UNKNOWN = 3  # Nagios: the check itself could not run
METRIC_LEVEL = {name: i for i, name in enumerate(SEVERITIES)}  # ok 0, info 1, warning 2, critical 3


async def gather(runtime: Runtime, window_minutes: float, recent: RecentEvents | None = None,
                 watching_since: datetime | None = None, silent_after_s: float = 0.0) -> Facts:
    """recent: the window's events as a follower of the event log keeps them (the alerts part); without
    it the window is read from the log. watching_since: when the follower began; no collector status
    before silent_after_s of watching is not yet a silent collector (a collector started beside it)."""
    facts = Facts(window_minutes=window_minutes)
    admin = runtime.admin
    try:
        facts = replace(facts, server=await admin.server())
    except Exception as e:  # the checks that need it are left unchecked, and the reason logged
        log.warning("check: the server's release not read: %s", e)
    try:
        streams, offline = await admin.stream_facts()
        facts = replace(facts, streams=tuple(streams), offline=offline)
    except Exception as e:
        log.warning("check: the stream list not read: %s", e)
    facts = replace(facts, domain_streams=await _domain_streams(admin, runtime.settings.collector.domains))
    try:
        facts = replace(facts, syncs=await runtime.system.server_syncs())
    except Exception as e:  # BATCH_025 says it could not run
        log.warning("check: the servers' fsync policy not read: %s", e)
    facts = await _consumers(runtime, facts)
    limits, source = await runtime.batch_limits()
    facts = replace(facts, limits=limits, limits_assumed=source.startswith(ASSUMED),
                    event_key_exposed=_key_exposed(runtime.settings))
    try:
        from console.storage.budgets import budgets_now

        budgets = await asyncio.to_thread(lambda: budgets_now(runtime.objectives, runtime.history))
        facts = replace(facts, budgets=tuple(budgets) if budgets is not None else None)
    except Exception as e:  # BATCH_031 says it could not run
        log.warning("check: the loss budgets not read: %s", e)
    try:
        events = recent.window(datetime.now(timezone.utc)) if recent is not None else \
            await _window(runtime, window_minutes)
    except Exception as e:  # no event key, no event log: the load and collector checks say they could not run
        log.warning("check: the event log was not read: %s", e)
        return facts
    facts = replace(facts, counts=window_counts(events), nonconforming=conformance_of(events),
                    canaries=canaries_of(events))
    statuses = [e for e in events if e.kind is EventKind.COLLECTOR_STATUS]
    if not statuses:
        watched = (datetime.now(timezone.utc) - watching_since).total_seconds() if watching_since else None
        if watched is not None and watched < silent_after_s:
            why = f"no collector status yet: watched for {watched:.0f} s, silent only after {silent_after_s:.0f} s"
            return replace(facts, unread_why={"collector_healthy": why, "advisories_durable": why, "system_account": why,
                                              "fast_paths_off": why})
        return replace(facts, collector_healthy=False, collector_age_s=None)
    last = statuses[-1]
    try:
        status = CollectorStatus.from_json(last.detail or "")
    except MalformedInput:
        return replace(facts, collector_healthy=False)
    system_account = status.publisher_note != NO_SYSTEM_ACCOUNT
    timeout = facts.limits.timeout if facts.limits is not None else 10.0
    return replace(facts, collector_age_s=(datetime.now(timezone.utc) - last.time).total_seconds(),
                   collector_healthy=status.healthy, collector_unhealthy=status.unhealthy,
                   fast_paths_off=status.fast_paths_off,
                   advisories_durable=status.advisories_durable, system_account=system_account,
                   stops_outside=stops_outside(events, timeout) if system_account else None)


async def _consumers(runtime: Runtime, facts: Facts) -> Facts:
    """Every consumer as the process's watch judges it: stalls need a window of reads (the alerts part samples
    every 10 s); a process that read once (`check`) leaves the consumer checks unchecked, and says why."""
    watch = runtime.consumers
    try:
        judged = tuple((await watch.read(fresh_within=watch.every)).judged)  # the sampler's read, not one more
    except Exception as e:  # BATCH_040..042 say they could not run
        log.warning("check: the consumers not read: %s", e)
        return facts
    window = watch.window.total_seconds()
    over = tuple(j for j in judged if j.judged_over_s >= window)
    if judged and not over:
        why = (f"one read of the consumers only: a stall is judged over {window:.0f} s of reads (the alerts part "
               "samples them; `batch-console consumers list --window 30` reads twice)")
        return replace(facts, consumers=judged, unread_why={**facts.unread_why, "consumers_over_window": why})
    return replace(facts, consumers=judged, consumers_over_window=over)


def canaries_of(events: list[Any]) -> tuple[CanaryResult, ...] | None:
    """The window's canary results (None when no canary ran: BATCH_032 says it could not run); one that
    does not read is left out."""
    found = []
    for event in events:
        if event.kind is EventKind.CANARY:
            try:
                found.append(canary_result(event))
            except MalformedInput:
                continue
    return tuple(found) or None


def conformance_of(events: list[Any]) -> dict[str, str] | None:
    """client -> the statements it fails, from the window's conformance events; None when there are none
    (no collector grading: BATCH_030 says it could not run)."""
    verdicts = Verdicts()
    for event in events:
        if event.kind is EventKind.CONFORMANCE:
            verdicts.apply(event)
    return verdicts.nonconforming() if len(verdicts) else None


async def _window(runtime: Runtime, minutes: float) -> list[Any]:
    from console.broker.eventlog import EventLog

    now = datetime.now(timezone.utc)
    log_ = EventLog.over(runtime.nc, runtime.event_log)
    return [e for _, e in await log_.window(now - timedelta(minutes=minutes), now, idle_timeout=0.5)]


def _key_exposed(settings: Settings) -> str | None:
    path = Path(settings.event_log.key_file) if settings.event_log.key_file else settings.data.data_dir / "event.key"
    if not path.is_file():  # a key from the environment, or none yet: no file for others to read
        return None if settings.event_log.key_file else ""
    return open_to_others(path) or ""


def thresholds(texts: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """The settings' CODE.name=value lines; ThresholdError for one that is not of the catalogue."""
    return {(code, name): value for code, name, value in map(parse_threshold, texts)}


# -- formats -----------------------------------------------------------------------------------

def _where(f: Finding) -> str:
    return "".join(f" [{w}]" for w in (f.system and f"system {f.system}", f.stream) if w)


def text(report: Report) -> str:
    lines = [f"{'UNKNOWN':8} system {system}: {why}" for system, why in report.unreachable]
    lines += [f"{f.severity.upper():8} {f.code} {f.title}{_where(f)}"
              + f"\n         {f.evidence}\n         remedy: {f.remedy}" for f in report.findings]
    lines += [f"{'UNCHECKED':8} {code} {CHECKS[code].title}: {why}" for code, why in report.unchecked]
    lines.append(f"{report.worst.upper()}: {_summary(report)}")
    return "\n".join(lines)


def as_json(report: Report) -> str:
    findings = [{k: v for k, v in asdict(f).items() if k != "system" or v is not None} for f in report.findings]
    return json.dumps({"status": report.worst, "findings": findings,
                       "unchecked": [{"code": c, "why": w} for c, w in report.unchecked],
                       "checked": list(report.checked),
                       **({"unreachable": [{"system": s, "why": w} for s, w in report.unreachable]}
                          if report.unreachable else {})}, indent=2)


def nagios(report: Report) -> str:
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("critical", "warning", "info")}
    state = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}[exit_code(report)]
    perf = " ".join(f"{s}={n}" for s, n in counts.items()) + f" unchecked={len(report.unchecked)}"
    if report.unreachable:
        perf += f" unreachable={len(report.unreachable)}"
    first = f"BATCH {state} - {_summary(report)} | {perf}"
    return "\n".join([first, *(f"UNKNOWN system {system}: {why}" for system, why in report.unreachable),
                       *(f"{f.severity.upper()} {f.code}{_where(f)}: {f.evidence}" for f in report.findings)])


def status_samples(report: Report) -> list[tuple[str, str, int]]:
    """(code, stream, level) of batch_console_check_status: each finding's, and 0 for a check that ran
    and found nothing; what `check --format prometheus` prints and the alerts part's /metrics serve."""
    samples = [(f["code"], f["stream"], METRIC_LEVEL[f["severity"]]) for f in by_code_and_stream(report)]
    found = {code for code, _, _ in samples}
    return samples + [(code, "", 0) for code in report.checked if code not in found]


def prometheus(report: Report) -> str:
    status = Metrics().check_status
    for code, stream, level in status_samples(report):
        status.set(code, stream, value=level)
    unchecked = Family("batch_console_check_unchecked", "A check that could not run (what it needs was not read)",
                       "gauge", ("code",))
    for code, _ in report.unchecked:
        unchecked.set(code, value=1)
    return "\n".join(status.render() + unchecked.render()) + "\n"


FORMATS: dict[str, Callable[[Report], str]] = {"text": text, "json": as_json, "nagios": nagios,
                                               "prometheus": prometheus}


def exit_code(report: Report) -> int:
    """The worst of the report: critical, then a system or every check that could not be checked
    (unknown), then warning, then ok."""
    worst = NAGIOS[report.worst] if report.checked else UNKNOWN
    if report.unreachable and worst != NAGIOS["critical"]:
        return UNKNOWN
    return worst


def by_code_and_stream(report: Report) -> list[dict[str, Any]]:
    """One finding per check and stream (the evidence joined, the worst severity): what is stored,
    what the metric and the Checks page show."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for f in report.findings:
        key = (f.code, f.stream or "")
        if key in merged:
            merged[key]["evidence"] += f"; {f.evidence}"
            continue
        merged[key] = {"code": f.code, "stream": f.stream or "", "severity": f.severity, "title": f.title,
                       "evidence": f.evidence, "remedy": f.remedy}
    return list(merged.values())


async def watch(runtime: Runtime, settings: Settings, store: Any, metrics: Any, stop: Any,
                on_findings: Callable[[list[dict[str, Any]]], None] = lambda found: None,
                recent: RecentEvents | None = None, caught_up: Callable[[], bool] = lambda: True,
                on_budgets: Callable[[list[Any]], None] = lambda statuses: None,
                on_consumers: Callable[[list[Any]], None] = lambda judged: None) -> None:
    """The alerts part's timer: the checks every check_every seconds into SQLite (the Checks page) and
    /metrics, so both say what `batch-console check` says."""
    from console.domain.checks import evaluate

    given = thresholds(settings.checks.check_thresholds)
    runtime.consumers.sample(idle_after=None)  # the consumer checks judge over a window of reads
    recorded = 0.0  # when the consumers' lag last went to the event log (History sums it per hour)
    while not stop.is_set() and not caught_up():  # a window half read would page at every start
        await asyncio.sleep(0.2)
    since = datetime.now(timezone.utc)
    silent_after = given.get(("BATCH_023", "silent_after_s"), CHECKS["BATCH_023"].thresholds["silent_after_s"])
    while not stop.is_set():
        try:
            facts = await gather(runtime, settings.checks.check_window, recent, since, silent_after)
            report = evaluate(facts, given, remedies=remedies())
            found = by_code_and_stream(report)
            on_findings(found)  # the alert rules on findings
            on_budgets(list(facts.budgets or ()))  # and on loss budgets
            on_consumers(list(facts.consumers or ()))  # and on consumer lag
            if facts.consumers and time.monotonic() - recorded >= LAG_RECORD_EVERY:
                recorded = time.monotonic()
                await _record_lag(runtime, list(facts.consumers))
            await asyncio.to_thread(store.save_findings, found, list(report.unchecked), datetime.now(timezone.utc))
            if metrics is not None:
                metrics.consumers(list(facts.consumers or ()))
                metrics.check_status.clear()
                for code, where, level in status_samples(report):
                    metrics.check_status.set(code, where, value=level)
        except Exception:  # the next round tries again; the alerts go on meanwhile
            log.exception("checks not evaluated")
        try:
            await asyncio.wait_for(stop.wait(), settings.checks.check_every)
        except asyncio.TimeoutError:
            pass


LAG_RECORD_EVERY = 60.0  # seconds between two records of every consumer's lag in the event log


async def _record_lag(runtime: Runtime, judged: list[Any]) -> None:
    """Every consumer's lag now, as events History reads (one a minute; a failure is said and the next tries)."""
    from console.broker.eventlog import EventLog
    from console.domain.consumer_lag import lag_records

    try:
        log_ = EventLog.over(runtime.nc, runtime.event_log)
        await log_.append(lag_records(judged, runtime.system.name or "default", datetime.now(timezone.utc)))
    except Exception as e:  # no event key yet, the server away: History misses this minute
        log.warning("consumers: the lag record not written: %s", e)


def _summary(report: Report) -> str:
    if not report.findings:
        return f"{len(report.checked)} checks passed" + (f", {len(report.unchecked)} not checked"
                                                         if report.unchecked else "")
    parts = [f"{sum(f.severity == s for f in report.findings)} {s}" for s in ("critical", "warning", "info")]
    return ", ".join(p for p in parts if not p.startswith("0 ")) + f" of {len(report.checked)} checks"


async def run_check(settings: Settings, output: str, codes: list[str] | None, stream: str | None) -> int:
    """The command: prints the report in `output`; its Nagios exit code (3 when nothing could be checked).
    With a systems file, every system is checked at once, each finding naming its system; one that
    cannot be reached is said, and the others are reported all the same."""
    from console.domain.checks import ThresholdError, across_systems, evaluate
    from console.errors import ConfigError, ConsoleError

    try:
        given = thresholds(settings.checks.check_thresholds)
        unknown = [c for c in codes or () if c not in CHECKS]
        if unknown:
            raise ThresholdError(f"not a check of the catalogue: {', '.join(c[:20] for c in unknown)}")
        systems = settings.systems()
        if systems and output == "prometheus":
            raise ConfigError("--format prometheus is one system's (each system's alerts part serves its own)")
        if not systems:
            report = evaluate(await _facts(settings), given, codes or None, stream, remedies())
        else:
            async def one(of: Settings) -> Report | str:
                try:
                    return evaluate(await _facts(of), given, codes or None, stream, remedies())
                except (ConsoleError, OSError, TimeoutError) as e:
                    return f"not checked: {str(e)[:300]}"

            found = await asyncio.gather(*(one(settings.of_system(s)) for s in systems))
            report = across_systems(dict(zip((s.name for s in systems), found)))
    except (ConsoleError, ThresholdError, OSError, TimeoutError) as e:
        print(f"BATCH UNKNOWN - {str(e)[:300]}" if output == "nagios" else f"batch-console check: {str(e)[:300]}")
        return UNKNOWN
    print(FORMATS[output](report))
    return exit_code(report)


async def _domain_streams(admin: StreamAdmin, domains: tuple[str, ...]
                         ) -> dict[str, tuple[StreamFacts, ...] | None]:
    """Each leaf domain's streams, through its API prefix; None for one not read (a leaf cut off)."""
    read: dict[str, tuple[StreamFacts, ...] | None] = {}
    for domain in domains:
        try:
            read[domain] = tuple((await admin.stream_facts(domain))[0])
        except Exception as e:  # BATCH_026 says it could not read them
            log.warning("check: the streams of domain %s not read: %s", domain, e)
            read[domain] = None
    return read


async def _facts(settings: Settings) -> Facts:
    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  system=True, allow_reconnect=False) as runtime:
        return await gather(runtime, settings.checks.check_window)
