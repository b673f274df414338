"""One runtime per process: opened from the settings, it owns what the process's parts share (the
NATS connection and the system account's, stream administration, the live state that follows the
event log, the SQLite history) and closes them. The web app is routes over a runtime, the notebook
console a runtime plus page factories (console.pages), and each CLI command opens one."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

from console.broker.admin import StreamAdmin
from console.broker.connection import Connection, cancelled
from console.broker.live_state import LiveState
from console.config import EventLogSettings, Settings, file_stamp, load
from console.domain.batch_limits import BatchLimits
from console.domain.conformance import Verdicts
from console.domain.audit import CLI
from console.domain.incident import Incident
from console.commands import RunProbe, RunSearch, Services
from console.probe import ProbeOptions, ProbeReport
from console.errors import BusyError, ConfigError, MaskingError, MissingKeyError
from console.system import NatsSystem

if TYPE_CHECKING:  # pandas and sqlmodel load only in a process that reads history or alerts (not the collector)
    from console.actions import Actions
    from console.alerting.view import AlertsView
    from console.broker.audit_log import AuditLog
    from console.domain.masking import Masking
    from console.domain.roles import Grants, RolesFile
    from console.domain.search import SearchQuery
    from console.domain.audit import Actor, Checked, Head
    from console.storage.history import Reader

log = logging.getLogger(__name__)
VERDICTS_WINDOW = 24 * 60.0  # minutes of the event log the conformance verdicts are read from
VERDICTS_FOR = 5.0  # seconds a read of them is kept
RECENT_TRAILS = 8  # reads of the audit trail kept (one per start day asked) for the pages' first answers
# Searches at once in one process, one per actor: each has a worker process of its own, and more than one
# a core starved the server itself on a 2-core machine (its requests timed out)
MAX_SEARCHES = max(2, os.cpu_count() or 2)


class Runtime:
    def __init__(self, settings: Settings, nc: Connection | NatsSystem, system_nc: Connection | None = None,
                 writes_events: bool = False, key_wait: float = 0.0, follow_without_key: bool = False):
        self.settings = settings
        self.follow_without_key = follow_without_key
        self.writes_events = writes_events  # the collector makes a missing event key; readers refuse to
        self.key_wait = key_wait  # a reading process waits this long for the collector's key at its start
        # the NATS system the services below are built on: its connections, administration and limits
        self.system = nc if isinstance(nc, NatsSystem) else NatsSystem(settings, nc, system_nc)
        self.system.on_reopened(self._rebind)
        self.system.reopening = self._say_reopening
        self._event_log: EventLogSettings | None = None
        self._live: LiveState | None = None
        self._history: tuple[Reader | None, str | None] | None = None
        self._alerts: AlertsView | None = None
        self._audit: AuditLog | None = None
        self._verdicts: tuple[float, Verdicts] | None = None
        self._trails: dict[datetime | None, tuple[datetime, Checked]] = {}  # the last read from each start
        self._masking: Masking | None = None
        self._roles: RolesFile | None = None
        self._roles_stamp: tuple[str, int, int] | None = None
        self._reading_ahead: asyncio.Task | None = None
        self._searching: set[int] = set()  # the actors (id of their Actions) whose search runs now

    @classmethod
    async def open(cls, settings: Settings | None = None, *, give_up_after: float | None = 30.0,
                   system: bool = False, writes_events: bool = False, key_wait: float = 0.0,
                   follow_without_key: bool = False, **connect_overrides: Any) -> Runtime:
        """Connects with the settings (default: the environment's, as a notebook wants); with
        system=True also as the system account user, when one is configured. A server that does
        not answer within give_up_after raises NatsUnreachableError naming it."""
        settings = load() if settings is None else settings
        system_ = await NatsSystem.open(settings, give_up_after=give_up_after, system=system, **connect_overrides)
        return cls(settings, system_, None, writes_events, key_wait, follow_without_key)

    @property
    def nc(self) -> Connection:
        """The system's account connection (the one it has now: a closed one is opened again)."""
        return self.system.nc

    @property
    def system_nc(self) -> Connection | None:
        return self.system.system_nc

    @property
    def admin(self) -> StreamAdmin:
        return self.system.admin

    @property
    def read_only(self) -> bool:
        return self.admin.read_only

    @property
    def event_log(self) -> EventLogSettings:
        """The event log's settings with the key resolved (made in the data directory when missing)."""
        if self._event_log is None:
            self._event_log = self.settings.keyed_event_log(make=self.writes_events, wait=self.key_wait)
        return self._event_log

    @property
    def live(self) -> LiveState:
        """The live state, following the event log from the first time it is asked for. Without an
        event key it raises MissingKeyError, unless `follow_without_key`: then it follows once the
        collector has made one, and says until then that there is none (the web's pages)."""
        if self._live is None:
            try:
                settings, missing = self.event_log, None
            except MissingKeyError as error:
                if not self.follow_without_key:
                    raise
                settings, missing = self.settings.event_log, str(error)
            self._live = LiveState(self.nc, settings, key_missing=missing,
                                   find_key=lambda: self.settings.keyed_event_log(make=False))
            self._live.start()
        return self._live

    @property
    def history(self) -> Reader | None:
        """The analytics job's SQLite tables, or None (history_problem says why)."""
        return self._open_history()[0]

    @property
    def history_problem(self) -> str | None:
        return self._open_history()[1]

    def _open_history(self) -> tuple[Reader | None, str | None]:
        if self._history is None:
            from console.storage.history import Reader
            from console.storage.sqlite import open_db_for_reading

            engine, problem = open_db_for_reading(self.settings.data.db_path)
            if problem:
                log.warning("%s; Live, Streams and Replay go on", problem)
            self._history = (Reader(engine) if engine is not None else None, problem)
        return self._history

    @property
    def alerts(self) -> AlertsView:
        """The alert rules and the alerts process's state in the data directory; its changes are the
        notebook's actions unless a page gives its session's."""
        if self._alerts is None:
            from console.alerting.view import AlertsView
            from console.domain.audit import NOTEBOOK

            self._alerts = AlertsView(self.settings.data.data_dir, self.settings.alerting.rules,
                                      self.settings.data.db_path, self.settings.notify_targets(), self.read_only,
                                      actions=self.actions(NOTEBOOK))
        return self._alerts

    def actions(self, actor: Actor, grants: Grants | Callable[[], Grants] | None = None,
                expires: datetime | None = None) -> Actions:
        """What `actor` may do through this runtime: what `grants` allow (default: the local role's, for a
        notebook, the CLI or a console without sign-in), until `expires` (a signed-in session's end), each
        attempt in the audit trail (signed with the event key: without one, nothing that changes is done)."""
        from console.actions import Actions

        local = self.settings.access.local_role
        grants = grants if grants is not None else lambda: self.roles.grants(local)
        trail_required = actor != CLI  # the CLI's user holds the credentials: what it does is said, not refused
        # the connection asked for at each command: a long-lived session's actions follow a reopened one
        services = Services(streams=self.admin, connection=lambda: self.nc, rules=lambda: self.alerts,
                            search=self._search)
        try:
            return Actions(self._audit_log(), actor, self.read_only, trail_required=trail_required, grants=grants,
                           expires=expires, services=services)
        except MissingKeyError as e:
            return Actions(None, actor, self.read_only, str(e), trail_required, grants, expires, services)

    @property
    def roles(self) -> RolesFile:
        """The roles and the groups they are given to. A file with an error, or a local role it does not
        define, stops the process at its start, with its line; the file is read again whenever it
        changes (a group removed loses its roles at once), and a change with an error gives no one any
        role until it is mended (said in the log): a typo never leaves a removed user their access."""
        access = self.settings.access
        stamp = file_stamp(access.roles)
        if self._roles is None or stamp != self._roles_stamp:
            try:
                self._roles = self._read_roles()
            except ConfigError as e:
                if self._roles is None:
                    raise
                from console.domain.roles import RolesFile

                log.error("%s: no one has a role until it is mended", e)
                self._roles = RolesFile({}, {})
            self._roles_stamp = stamp
        return self._roles

    def _read_roles(self) -> RolesFile:
        from console.commands import LEAST_ROLE
        from console.domain.roles import load_roles

        access = self.settings.access
        try:
            roles = load_roles(access.roles.read_text() if access.roles else "", LEAST_ROLE)
        except (OSError, ValueError) as e:
            raise ConfigError(f"roles {access.roles}: {e}") from None
        if access.local_role not in roles.roles:
            raise ConfigError(f"the local role {access.local_role[:64]!r} is not a role "
                              f"({', '.join(sorted(roles.roles))[:200]})")
        return roles

    def _audit_log(self) -> AuditLog:
        """The audit trail's stream, one per process (its stream ensured once), its head checkpointed in
        the data directory's SQLite; MissingKeyError without an event key, which signs and checks every record."""
        from console.broker.audit_log import STREAM, AuditLog
        from console.storage.audit_checkpoint import AuditCheckpoint

        if self._audit is None:
            key = self.event_log.key
            if key is None:
                raise MissingKeyError("no event key: the audit trail is neither signed nor checked")
            try:
                checkpoint = AuditCheckpoint(self.settings.data.db_path, STREAM)
            except Exception as e:  # an unreadable database: the trail is still signed and chained
                log.error("the audit trail's checkpoint cannot be kept in %s: %s", self.settings.data.db_path, e)
                checkpoint = None
            self._audit = AuditLog(self.nc, key, self.settings.event_log.replicas, checkpoint)
        return self._audit

    async def batch_limits(self) -> tuple[BatchLimits, str]:
        """The system's effective batch limits and where they were read (console.system)."""
        return await self.system.batch_limits()

    def keep_open(self) -> None:
        """A long-lived process's connections stay open whatever closed them (console.system); Live
        says so meanwhile, and the services follow the fresh connection."""
        self.system.keep_open()

    def _say_reopening(self, why: str) -> None:
        if self._live is not None:
            self._live.reopening = why

    async def _rebind(self, fresh: Connection) -> None:
        if self._audit is not None:
            self._audit.nc = fresh
        if self._live is not None:
            await self._live.rebind(fresh)

    async def audit_trail(self, since: datetime | None = None) -> Checked:
        """The audit trail's records (from `since`), with every break in its chain: held against this data
        directory's checkpoint and the collector's latest signed status, a witness wherever it runs."""
        checked = await self._audit_log().read(since, await self._witnessed())
        self._trails.pop(since, None)
        self._trails[since] = (datetime.now(timezone.utc), checked)
        while len(self._trails) > RECENT_TRAILS:
            self._trails.pop(next(iter(self._trails)))
        return checked

    def recent_audit_trail(self, since: datetime | None = None) -> tuple[datetime, Checked] | None:
        """The last read of the trail from `since` and when it was made, or None: what a page shows in its
        first answer while it reads the trail again."""
        return self._trails.get(since)

    def recent_verdicts(self) -> Verdicts | None:
        """The last read of the verdicts (however old), or None."""
        return self._verdicts[1] if self._verdicts else None

    def read_ahead(self, audit_since: datetime) -> None:
        """Read once, in the background, what the pages that read NATS show first (the audit trail, the
        verdicts), so that even a first visit's first answer has a copy."""
        if self._reading_ahead is None:
            self._reading_ahead = asyncio.create_task(self._read_ahead(audit_since), name="read-ahead")

    async def _read_ahead(self, audit_since: datetime) -> None:
        for read in (lambda: self.audit_trail(audit_since), self.verdicts):
            try:
                await read()
            except Exception as e:  # no event key yet, no trail: the page says so when it reads
                log.info("not read ahead for the pages: %s", e)

    async def _witnessed(self) -> Head | None:
        """The trail's head as the collector's latest status saw it (the live state's, else the last minute
        of the event log's), or None."""
        from console.broker.eventlog import EventLog
        from console.domain.audit import Head
        from console.domain.events import EventKind
        from console.domain.status import CollectorStatus, MalformedStatus

        status = self._live.model.collector if self._live is not None else None
        if status is None:
            end = datetime.now(timezone.utc)
            try:
                found = await EventLog.over(self.nc, self.event_log).window(
                    end - timedelta(minutes=1), end, kind_filter=f"{EventKind.COLLECTOR_STATUS.value}.>",
                    idle_timeout=1.0)
                status = CollectorStatus.from_json(found[-1][1].detail or "") if found else None
            except (MalformedStatus, MissingKeyError):
                return None
            except Exception as e:  # no event log yet, the server slow: the checkpoint still holds the trail
                log.info("no collector status read for the audit trail's witness: %s", e)
                return None
        if status is None or not status.audit_seq or not re.fullmatch(r"[0-9a-f]{64}", status.audit_hash):
            return None
        return Head(status.audit_seq, status.audit_hash)

    async def verdicts(self, window_minutes: float = VERDICTS_WINDOW) -> Verdicts:
        """The clients' latest conformance verdicts in the event log's last `window_minutes` (kept a few
        seconds: every page of every session asks)."""
        now = time.monotonic()
        if self._verdicts is None or now - self._verdicts[0] > VERDICTS_FOR or window_minutes != VERDICTS_WINDOW:
            found = await self._read_verdicts(window_minutes)
            if window_minutes != VERDICTS_WINDOW:
                return found
            self._verdicts = (now, found)
        return self._verdicts[1]

    async def _read_verdicts(self, window_minutes: float) -> Verdicts:
        from console.broker.eventlog import EventLog
        from console.domain.events import EventKind

        end = datetime.now(timezone.utc)
        found = Verdicts()
        for _, event in await EventLog.over(self.nc, self.event_log).window(
                end - timedelta(minutes=window_minutes), end, kind_filter=f"{EventKind.CONFORMANCE.value}.>",
                idle_timeout=2.0):  # the read ends at the last one; this long is waited only when there is none
            found.apply(event)
        return found

    async def find_incident(self, batch_id: str) -> Incident | None:
        from console.investigate import find_incident

        return await find_incident(self.live.log, batch_id, model=self.live.model, history=self.history)

    async def search(self, actions: Actions, query: SearchQuery, progress=None, cancelled=lambda: False,
                     on_match=None):
        """A search of any stream, as the action search.run of whoever `actions` acts for: (matches, how it
        ended). The command's work is `_search`."""
        return await actions.run(RunSearch(query, progress, cancelled, on_match))

    async def _search(self, asker: Actions, query: SearchQuery, progress, cancelled, on_match):
        """The search service: one at a time per actor (a browser session), MAX_SEARCHES in the process;
        it stops when `cancelled` says so or the actor's session ends; payloads masked for the asker."""
        from console.broker.search import search

        shown = self.masking.shown(query.stream, asker.payloads(query.stream))
        if id(asker) in self._searching:
            raise BusyError("a search of this session is running: cancel it or wait for it first")
        if len(self._searching) >= MAX_SEARCHES:
            raise BusyError(f"the console runs {MAX_SEARCHES} searches already: try again when one ends")
        self._searching.add(id(asker))
        try:
            return await search(self.nc, query, progress, lambda: cancelled() or asker.ended, shown, on_match)
        finally:
            self._searching.discard(id(asker))

    @property
    def masking(self) -> Masking:
        """The payload masking rules and switch (read once; a file with an error stops the process
        at its start, with its line)."""
        if self._masking is None:
            from console.domain.masking import load_masking

            data = self.settings.data
            try:
                text = data.mask_rules.read_text() if data.mask_rules else ""
                self._masking = load_masking(text, payloads=not data.no_payloads)
            except (OSError, ValueError) as e:
                raise MaskingError(f"masking rules {data.mask_rules}: {e}") from None
        return self._masking

    async def run_probe(self, actions: Actions, options: ProbeOptions, progress=None) -> ProbeReport:
        """The probe, as the action probe.run of whoever `actions` acts for (refused in read-only mode)."""
        return await actions.run(RunProbe(options, progress))

    async def close(self) -> None:
        if self._reading_ahead is not None:
            await cancelled(self._reading_ahead)
        if self._live is not None:
            await self._live.stop()
        await self.system.close()
        if self._history is not None and self._history[0] is not None:
            self._history[0].engine.dispose()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *_) -> None:
        await self.close()
