"""`batch-console analytics`: the PySpark job keeping history in SQLite and Delta, once, on a schedule or
following the event log."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from typing import Callable

from console.broker.connection import close, connect
from console.cli.base import WITH_EVENT_LOG, Subcommand
from console.config import Settings, Watched, spark_options
from console.errors import ConfigError
from console.progress import ProgressBar
from console.runtime import objectives_of


class Analytics(Subcommand):
    name, help = "analytics", "keep abandonment and gap history in SQLite and Delta (PySpark)"
    settings = (*WITH_EVENT_LOG, "analytics", "fleet")
    aliases = {"--analytics-every": "--every", "--spark-master": "--master"}

    @classmethod
    def configure(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="one run, then exit (default: a run every "
                                                                "--analytics-every seconds until stopped)")

    @classmethod
    def run(cls, settings: Settings, args: argparse.Namespace) -> int:
        return cmd_analytics(settings, args.once)


def backlog_progress(step: int) -> Callable[[int, int], None]:
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


def cmd_analytics(settings: Settings, once: bool) -> int:
    """The analytics job on one system, or, with a systems file, on each in turn in one Spark session: each
    system's event log into its own console.db and delta/ (DATA_DIR/systems/NAME); one that cannot be
    reached is said, and the others run."""
    from console.analytics.follow import HEARTBEATS_DEFERRED, WAKES_FOLLOW, follow
    from console.analytics.ledger_tail import LedgerTail
    from console.broker.log_watcher import AnyOf, LogWatcher
    from console.analytics.job import JobSettings, LazySession, run_once, spark_session  # PySpark loads only here
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
    spark = LazySession(lambda: spark_session(a.master, remote=a.remote, keep_workers=a.keep_workers,
                                              driver_memory=a.driver_memory, full_jit=a.full_jit))
    watchers: list[LogWatcher] = []
    tails: list[LedgerTail] = []
    levelled = False  # a follow process's first run reads what the log holds, heartbeats too; later ones leave
    # heartbeats to a run with more in it (Spark starts with the first run that needs it: LazySession)

    def run() -> None:
        nonlocal levelled
        for name, job in jobs.items():
            said = f"analytics: system {name}: " if name else "analytics: "
            try:
                report = run_once(spark, dataclasses.replace(job, objectives=objectives()),  # as the file is now
                                  progress=backlog_progress(job.max_events),
                                  defer_heartbeats=HEARTBEATS_DEFERRED if a.follow and levelled else 0)
            except Exception as e:  # of several systems, one not reached: the others run
                if not name:
                    raise
                print(f"{said}not run: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__}", flush=True)
                continue
            levelled = levelled or report.events_read > 0 or bool(report.skipped)
            print(f"{said}{report.line()}", flush=True)

    try:
        if once:
            run()
        elif a.follow:
            prefix = settings.event_log.subject_prefix
            # A loss wakes the job (its run gives the loss its context within seconds); everything else (clean
            # batches, heartbeats, canaries, consumer lag) waits for the timer: a quiet log costs no Spark job
            wakes = tuple(f"{prefix}.{kind.value}." for kind in WAKES_FOLLOW)
            watchers = [LogWatcher(each.connection, f"{prefix}.>", wakes).start()
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
        for watcher in watchers:
            watcher.stop()
        for tail in tails:
            tail.stop()
        spark.stop()
