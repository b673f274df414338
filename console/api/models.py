"""What the API takes and answers, as typed models: FastAPI writes the OpenAPI document from them. Where a
page reads a dataclass (StreamBatchSettings, Finding), the API answers that same one."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal

from fastapi import Path
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from console.domain.checks import Finding
from console.queries.history import HistoryTable  # noqa: F401 (the names every face takes, from one place)

MAX_PAGE = 1000
EARLIEST_TIME, LATEST_TIME = datetime(1900, 1, 1, tzinfo=timezone.utc), datetime(9000, 1, 1, tzinfo=timezone.utc)


def _rfc3339(value: object) -> object:
    """A time as RFC 3339 writes it, and nothing else (not a number of seconds, not a bare date)."""
    if not isinstance(value, str) or len(value) > 64 or "T" not in value.upper():
        raise ValueError("a time as RFC 3339 writes it: 2026-11-27T10:00:00Z")
    try:
        moment = datetime.fromisoformat(value.upper().replace(":60", ":59"))  # a leap second, one earlier
    except ValueError:
        raise ValueError("a time as RFC 3339 writes it: 2026-11-27T10:00:00Z") from None
    if moment.tzinfo is None:
        raise ValueError("a time with its offset, as RFC 3339 writes it: 2026-11-27T10:00:00Z")
    # Before 1900 reads as 1900, after 9000 as 9000 (nothing the console holds is outside): a window of
    # days either side of it is still a time (year 1 less a week was a 500)
    return min(max(moment, EARLIEST_TIME), LATEST_TIME)


Time = Annotated[datetime, BeforeValidator(_rfc3339)]
# What the server takes as a stream name (console/domain/wire.py), and a batch id: as the document says
STREAM = Annotated[str, Path(pattern=r"^[^\x00-\x20\x7f.*>/\\]+$", max_length=255)]
BATCH = Annotated[str, Path(pattern=r"^[^\x00-\x1f\x7f]+$", max_length=64)]
RULE = Annotated[str, Path(pattern=r"^[^\x00-\x1f\x7f]+$", max_length=200)]
OBJECTIVE = Annotated[str, Path(pattern=r"^[^\x00-\x1f\x7f]+$", max_length=100)]
NODE = Annotated[str, Path(pattern=r"^[^\x00-\x20\x7f]+$", max_length=128)]  # a server's name (domain/maintenance.py)
JOB = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{16}$")]  # a search's id (console/api/jobs.py)
ExportFormatName = Literal["csv", "jsonl", "parquet"]


class SystemOut(BaseModel):
    name: str
    reachable: bool
    why: str | None = None


class LossOut(BaseModel):
    id: str  # the event's id: stable, unique
    time: datetime
    system: str
    stream: str | None
    batch_id: str | None
    reason: str
    kind: Literal["atomic", "fast"]
    publisher: str | None = None
    unverified: bool = False
    cluster: str | None = None
    domain: str | None = None  # the JetStream domain its advisory named (a leaf node's)


class LossesPage(BaseModel):
    items: list[LossOut]
    total: int
    limit: int
    offset: int
    next: str | None = None  # the cursor of the next page: no loss skipped or repeated as new ones arrive


class BatchSettingsPatch(BaseModel):
    """The batch settings to change; those left out stay as they are."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "yes" is not true: a script says what it means
    allow_atomic: bool | None = None
    allow_batched: bool | None = None
    persist_mode: Literal["default", "async"] | None = None


class RuleIn(BaseModel):
    """One alert rule as the rules file writes it: a `[[rule]]` table of TOML, named as the path names it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    toml: str = Field(max_length=16_384, description='[[rule]]\nname = "..."\nwhen = "lost_batches"\n...')


class ChecksOut(BaseModel):
    status: str
    evaluated: datetime | None
    findings: list[Finding]
    unchecked: list[dict[str, str]]


class BudgetOut(BaseModel):
    """One objective's measure now: its budget window's counts, what they spent, and its burn rates."""

    objective: str
    measure: str  # messages | batches
    state: str  # within, SPENT, burning ... (page|ticket), not known: ...
    allowed_per_million: float  # the objective's error rate, per million of the measure
    window_days: int
    lost: int
    total: int
    known: bool
    spent: float | None  # of the budget: 1 is all of it
    remaining: float | None
    burn_rates: dict[str, float | None]  # window (5m .. 3d) -> burn rate; None: nothing published there
    as_of: datetime


class CanaryOut(BaseModel):
    """One canary batch through one node."""

    time: datetime
    system: str
    node: str
    kind: str  # atomic | fast
    first_ack_ms: float | None
    commit_ms: float | None
    lost: int
    sent: int
    error: str | None
    led_elsewhere: bool


class BudgetLossOut(BaseModel):
    time: datetime
    stream: str
    batch_id: str | None
    what: str
    publisher: str


class RuleOut(BaseModel):
    name: str
    when: str
    severity: str
    muted: bool
    streams: list[str]
    systems: list[str]


class AuditRecordOut(BaseModel):
    seq: int
    time: datetime
    user: str
    address: str
    action: str
    target: str
    outcome: str
    detail: str


class AuditOut(BaseModel):
    intact: bool
    breaks: list[str]
    records: list[AuditRecordOut]


class VerifyOut(BaseModel):
    """`batch-console audit --verify`: whether every record's chain holds, from the trail's first record."""

    intact: bool
    records: int
    written: int  # records the console wrote through its data directory (0: not known)
    unsafe: str | None  # why the trail's stream could be erased quietly, when it could
    first: datetime | None
    last: datetime | None
    breaks: list[str]
    aged_out: int = 0  # the oldest records, gone at the trail's limit (not erased: the trail lets them go)


class HealthOut(BaseModel):
    system: str
    connection: str
    collector: str
    event_key_problem: str | None
    last_event_seconds_ago: float | None
    events_skipped: int
