"""The audit trail as the pages, the CLI and the actions use it: one stream per process (ensured once),
its head checkpointed in the data directory's SQLite and witnessed by the collector's signed status."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from console.broker.connection import Connection
from console.config import EventLogSettings
from console.domain.systems import DEFAULT
from console.errors import MissingKeyError

if TYPE_CHECKING:
    from console.broker.audit_log import AuditLog
    from console.domain.audit import Checked, Head
    from console.domain.status import CollectorStatus

log = logging.getLogger(__name__)
RECENT_TRAILS = 8  # reads of the audit trail kept (one per start day asked) for the pages' first answers


class AuditTrail:
    def __init__(self, connection: Callable[[], Connection], event_log: Callable[[], EventLogSettings],
                 db_path: Path, replicas: int | None, status: Callable[[], CollectorStatus | None],
                 system: str = DEFAULT):
        """status: the collector's latest status as this process follows it (None: not followed); system:
        whose trail it is (each system's head is checkpointed apart: one data directory, several systems)."""
        self._connection, self._event_log, self._db_path, self._replicas = connection, event_log, db_path, replicas
        self._system = system
        self._status = status
        self._log: AuditLog | None = None
        self._trails: dict[datetime | None, tuple[datetime, Checked]] = {}  # the last read from each start

    def log(self) -> AuditLog:
        """The trail's stream; MissingKeyError without an event key, which signs and checks every record."""
        from console.broker.audit_log import STREAM, AuditLog
        from console.storage.audit_checkpoint import AuditCheckpoint

        if self._log is None:
            key = self._event_log().key
            if key is None:
                raise MissingKeyError("no event key: the audit trail is neither signed nor checked")
            try:
                checkpoint = AuditCheckpoint(self._db_path, STREAM if self._system == DEFAULT else
                                             f"{self._system}/{STREAM}")
            except Exception as e:  # an unreadable database: the trail is still signed and chained
                log.error("the audit trail's checkpoint cannot be kept in %s: %s", self._db_path, e)
                checkpoint = None
            self._log = AuditLog(self._connection(), key, self._replicas, checkpoint)
        return self._log

    def rebind(self, fresh: Connection) -> None:
        if self._log is not None:
            self._log.nc = fresh

    async def read(self, since: datetime | None = None) -> Checked:
        """The records (from `since`), with every break in the chain: held against this data directory's
        checkpoint and the collector's latest signed status, a witness wherever it runs."""
        checked = await self.log().read(since, await self._witnessed())
        self._trails.pop(since, None)
        self._trails[since] = (datetime.now(timezone.utc), checked)
        while len(self._trails) > RECENT_TRAILS:
            self._trails.pop(next(iter(self._trails)))
        return checked

    def recent(self, since: datetime | None = None) -> tuple[datetime, Checked] | None:
        """The last read from `since` and when it was made, or None: what a page shows in its first
        answer while it reads the trail again."""
        return self._trails.get(since)

    async def _witnessed(self) -> Head | None:
        """The trail's head as the collector's latest status saw it (the live state's, else the last minute
        of the event log's), or None."""
        from console.broker.eventlog import EventLog
        from console.domain.audit import Head
        from console.domain.events import EventKind
        from console.domain.status import CollectorStatus, MalformedStatus

        status = self._status()
        if status is None:
            end = datetime.now(timezone.utc)
            try:
                found = await EventLog.over(self._connection(), self._event_log()).window(
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
