"""One runtime per process: opened from the settings, it owns what the process's parts share (the
NATS connection and the system account's, stream administration, the live state that follows the
event log, the SQLite history) and closes them. The web app is routes over a runtime, the notebook
console a runtime plus page factories (console.pages), and each CLI command opens one."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from console.broker.admin import StreamAdmin
from console.broker.connection import Connection, cancelled
from console.broker.live_state import LiveState
from console.config import EventLogSettings, Settings, Watched, load
from console.domain.batch_limits import BatchLimits
from console.domain.audit import CLI
from console.domain.live_model import LiveModel
from console.commands import Services
from console.errors import ConfigError, MaskingError, MissingKeyError
from console.services.audit import AuditTrail
from console.payloads import Payloads, masked_role
from console.services.roles import RolesWatch
from console.services.searches import Searches
from console.services.verdicts import VerdictsReader
from console.system import NatsSystem

if TYPE_CHECKING:  # pandas and sqlmodel load only in a process that reads history or alerts (not the collector)
    from console.consumers import ConsumerWatch
    from console.domain.budgets import Objective
    from console.actions import Actions
    from console.alerting.view import AlertsView
    from console.decoders.rules import Decoders
    from console.domain.masking import Masking
    from console.domain.roles import Grants, RolesFile
    from console.domain.audit import Actor
    from console.storage.history import Reader

log = logging.getLogger(__name__)


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
        self._masking: Masking | None = None
        self._decoders: Decoders | None = None
        self._consumers: ConsumerWatch | None = None
        # the processes that read objectives check the file at their start (check_files): an error met since is said
        self.objectives_file: Watched[list[Objective]] = Watched(settings.data.objectives,
                                                                 lambda: objectives_of(settings), fallback=list)
        self._reading_ahead: asyncio.Task[None] | None = None
        # the services built on the system, each asking for the connection it has now
        connection = lambda: self.nc  # noqa: E731
        self.audit = AuditTrail(connection, lambda: self.event_log, settings.data.db_path, settings.event_log.replicas,
                                lambda: self._live.model.collector if self._live is not None else None,
                                settings.fleet.name)
        self.verdicts = VerdictsReader(connection, lambda: self.event_log)
        self.searches = Searches(connection, self.payloads, lambda: self.decoders)
        self.roles_file = RolesWatch(settings.access)

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
    def consumers(self) -> ConsumerWatch:
        """Every consumer of the system's streams, judged over the reads this process made (console.consumers)."""
        if self._consumers is None:
            from console.consumers import ConsumerWatch, operators_streams

            self._consumers = ConsumerWatch(self.system.consumer_admin, operators_streams(self.settings.event_log.stream),
                                            self.settings.fleet.name, domains=self.settings.collector.domains)
        return self._consumers

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
            self._live = LiveState(self.nc, settings, key_missing=missing, model=LiveModel(system=self.system.name),
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
        if self.settings.fleet.systems is not None:  # of a systems file: the roles that hold on this system
            given, system = grants, self.system.name
            grants = lambda: (given() if callable(given) else given).on_system(system)  # noqa: E731
        trail_required = actor != CLI  # the CLI's user holds the credentials: what it does is said, not refused
        # the connection asked for at each command: a long-lived session's actions follow a reopened one
        services = Services(streams=self.admin, consumers=self.system.consumer_admin, connection=lambda: self.nc, system_connection=lambda: self.system_nc,
                            rules=lambda: self.alerts, search=self.searches, payloads=self.payloads)
        try:
            return Actions(self.audit.log(), actor, self.read_only, trail_required=trail_required, grants=grants,
                           expires=expires, services=services)
        except MissingKeyError as e:
            return Actions(None, actor, self.read_only, str(e), trail_required, grants, expires, services)

    @property
    def roles(self) -> RolesFile:
        """The roles and the groups they are given to, as the roles file says now (console.services.roles)."""
        return self.roles_file()

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
        self.audit.rebind(fresh)
        if self._live is not None:
            await self._live.rebind(fresh)

    def read_ahead(self, audit_since: datetime) -> None:
        """Read once, in the background, what the pages that read NATS show first (the audit trail, the
        verdicts), so that even a first visit's first answer has a copy."""
        if self._reading_ahead is None:
            self._reading_ahead = asyncio.create_task(self._read_ahead(audit_since), name="read-ahead")

    async def _read_ahead(self, audit_since: datetime) -> None:
        for read in (lambda: self.audit.read(audit_since), self.verdicts):
            try:
                await read()
            except Exception as e:  # no event key yet, no trail: the page says so when it reads
                log.info("not read ahead for the pages: %s", e)

    @property
    def decoders(self) -> Decoders | None:
        """The operator's decoders file, read once (an error stops the process at its start, with its line)."""
        if self._decoders is None and self.settings.data.decoders is not None:
            self._decoders = _decoders_of(self.settings)
        return self._decoders

    @property
    def objectives(self) -> list[Objective]:
        """The loss budgets' objectives as the file is now (an error stops the process at its start, with its
        line, in check_files; a later one keeps the objectives before it, said by `objectives_file.error`)."""
        return self.objectives_file()

    def payloads(self, level: Callable[[str], str] = masked_role) -> Payloads:
        """The payload pipeline for a reader whose roles see `level` of each stream's payloads (Grants.payloads;
        default: masked, as the collector keeps them)."""
        return Payloads(self.masking, self.decoders, level)

    @property
    def masking(self) -> Masking:
        """The payload masking rules and switch (read once; a file with an error stops the process
        at its start, with its line)."""
        if self._masking is None:
            self._masking = _masking_of(self.settings)
        return self._masking

    async def close(self) -> None:
        if self._reading_ahead is not None:
            await cancelled(self._reading_ahead)
        if self._live is not None:
            await self._live.stop()
        if self._consumers is not None:
            await self._consumers.stop()
        await self.system.close()
        if self._history is not None and self._history[0] is not None:
            self._history[0].engine.dispose()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()


def check_files(settings: Settings) -> None:
    """The masking rules, the decoders, the objectives and the roles file, read as a runtime reads them: a
    ConfigError with its line, before anything is asked of a server (a page is never shown unmasked)."""
    _masking_of(settings)
    _decoders_of(settings)
    objectives_of(settings)
    RolesWatch(settings.access)()


def objectives_of(settings: Settings) -> list[Objective]:
    """The loss budgets' objectives (none without a file): ConfigError with the line."""
    from console.domain.budgets import parse_objectives

    path = settings.data.objectives
    if path is None:
        return []
    try:
        return parse_objectives(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"objectives {path}: {e}") from None


def _decoders_of(settings: Settings) -> Decoders | None:
    """The decoders file read and each decoder built (its schema files too): ConfigError with the line.
    A search's worker reads it again itself: the file is the operator's, and one search one process."""
    from console.decoders.rules import load_decoders

    if settings.data.decoders is None:
        return None
    try:
        return load_decoders(settings.data.decoders)
    except ValueError as e:
        raise ConfigError(f"decoders {settings.data.decoders}: {e}") from None


def _masking_of(settings: Settings) -> Masking:
    from console.domain.masking import load_masking

    data = settings.data
    try:
        text = data.mask_rules.read_text() if data.mask_rules else ""
        return load_masking(text, payloads=not data.no_payloads)
    except (OSError, ValueError) as e:
        raise MaskingError(f"masking rules {data.mask_rules}: {e}") from None
