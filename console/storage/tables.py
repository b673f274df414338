"""The SQLite tables: what the analytics job writes and the web app and notebooks read, and the alerts
process's state (what fires, what was sent, each delivery attempt)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel


class AbandonmentHourly(SQLModel, table=True):
    __tablename__ = "abandonment_hourly"
    hour: datetime = Field(primary_key=True)
    stream: str = Field(primary_key=True)
    kind: str = Field(primary_key=True)  # atomic | fast
    reason: str = Field(primary_key=True)
    batches: int


class GapHourly(SQLModel, table=True):
    __tablename__ = "gap_hourly"
    hour: datetime = Field(primary_key=True)
    stream: str = Field(primary_key=True)
    gap_mode: str = Field(primary_key=True)
    gaps: int
    lost: int


class FastBatchSummary(SQLModel, table=True):
    __tablename__ = "fast_batch_summary"
    batch_id: str = Field(primary_key=True)
    stream: str = Field(index=True)
    started: datetime = Field(index=True)
    ended: datetime | None = None
    outcome: str
    gap_mode: str | None = None
    messages: int | None = None
    gaps: int
    lost: int
    errors: int
    min_flow: int | None = None
    max_flow: int | None = None


class AbandonedBatch(SQLModel, table=True):
    __tablename__ = "abandoned_batches"
    event_id: str = Field(primary_key=True)
    time: datetime = Field(index=True)
    stream: str = Field(index=True)
    batch_id: str | None = Field(default=None, index=True)
    kind: str
    reason: str | None = None
    account: str | None = None
    unverified: bool = False  # the system account never sent this advisory
    publisher: str | None = None  # the connection that published the batch, as the server named it
    domain: str | None = None  # the JetStream domain its advisory named (a leaf's), where one did
    log_seq: int
    leader_elections: int
    stream_updates: int
    other_abandonments: int
    gaps_nearby: int
    provisional: bool = False  # written as the log had it, before the job's run counted its context (ledger_tail)


class CaptureInterruption(SQLModel, table=True):
    """A window in which the server may have dropped advisories unseen (console.collector.capture_watch)."""

    __tablename__ = "capture_interruptions"
    event_id: str = Field(primary_key=True)
    start: datetime = Field(index=True)
    end: datetime
    reason: str | None = None


class Maintenance(SQLModel, table=True):
    """A maintenance the console did (drain, restart), as its ended record in the event log says it."""

    __tablename__ = "maintenances"
    event_id: str = Field(primary_key=True)
    start: datetime = Field(index=True)
    end: datetime
    action: str
    nodes: str | None = None
    actor: str | None = None
    lost: int | None = None  # batches lost on the streams touched, from the ledger; None: it could not tell
    unexpected: int | None = None  # of those, the ones not named before a step
    outcome: str | None = None


class ConsumerLagHourly(SQLModel, table=True):
    """A consumer's hour, from the alerts part's lag records (console.analytics.transforms.consumer_lag_hourly)."""

    __tablename__ = "consumer_lag_hourly"
    hour: datetime = Field(primary_key=True)
    stream: str = Field(primary_key=True)
    consumer: str = Field(primary_key=True)
    reads: int
    max_pending: int | None = None
    max_lag_seconds: float | None = None
    mean_lag_seconds: float | None = None
    stalled_reads: int = 0


class StreamAbandonmentStats(SQLModel, table=True):
    __tablename__ = "stream_abandonment_stats"
    stream: str = Field(primary_key=True)
    abandonments: int
    first: datetime
    last: datetime
    mean_seconds: float | None = None


class BudgetCount(SQLModel, table=True):
    """What loss budgets count per 5-minute bucket, stream and publisher (console.analytics.budgets)."""

    __tablename__ = "budget_counts"
    bucket: datetime = Field(primary_key=True)
    stream: str = Field(primary_key=True)
    publisher: str = Field(primary_key=True)  # "" where no publisher is known
    stored: int = 0
    fast_stored: int = 0
    lost_messages: int = 0
    batches: int = 0
    lost_batches: int = 0
    atomic_uncounted: int = 0
    atomic_batches: int = 0  # a publisher's atomic batches, as the publish side saw them open
    atomic_stored: int = 0  # the messages their commits stored
    publisher_uncounted: int = 0  # atomic losses of a publisher whose atomic batches nobody counted
    atomic_unsized: int = 0  # atomic losses whose messages nobody counted


class BudgetStatusRow(SQLModel, table=True):
    """Each objective's measure as the job's last run left it (console.domain.budgets.BudgetStatus)."""

    __tablename__ = "budget_status"
    objective: str = Field(primary_key=True)
    measure: str = Field(primary_key=True)  # messages | batches
    as_of: datetime
    allowed: float  # the error rate it allows
    window_days: float
    lost: int
    total: int
    known: bool
    spent: float | None = None  # of the budget (1: all of it)
    burn_5m: float | None = None
    burn_30m: float | None = None
    burn_1h: float | None = None
    burn_2h: float | None = None
    burn_6h: float | None = None
    burn_1d: float | None = None
    burn_3d: float | None = None


EVENTS_SOURCE = "events"  # the analytics job's offset in job_offsets: the event log
# Past the offset, up to here the log was checked to hold nothing but the collector's heartbeat:
# History is level with it, though those heartbeats reach the raw events only with the next run.
HEARTBEATS_CHECKED = "events: heartbeats only"
LEDGER_TAIL = "events: losses as they came"  # the last loss or retraction `analytics --follow` put in the ledger


class JobOffset(SQLModel, table=True):
    """The last event-log sequence whose results are in these tables; written in the same transaction."""

    __tablename__ = "job_offsets"
    source: str = Field(primary_key=True)
    seq: int
    updated: datetime


class AlertFiring(SQLModel, table=True):
    """An alert firing now: restored after a restart of the alerts process, so it does not fire again."""

    __tablename__ = "alert_firing"
    rule: str = Field(primary_key=True)
    stream: str = Field(primary_key=True)
    since: datetime
    last_sent: datetime


class AlertNotice(SQLModel, table=True):
    """A notice the alerts process sent (firing or resolved), as the receivers got it."""

    __tablename__ = "alert_notices"
    id: int | None = Field(default=None, primary_key=True)
    time: datetime
    body: str  # the notice's JSON


class AlertDelivery(SQLModel, table=True):
    """One delivery attempt of a notice to one target, with the receiver's answer or the error."""

    __tablename__ = "alert_deliveries"
    id: int | None = Field(default=None, primary_key=True)
    time: datetime
    rule: str
    stream: str
    status: str
    target: str
    ok: bool
    answer: str


class AlertProblem(SQLModel, table=True):
    """A rules file the alerts process refused (its old rules stay in force); one row, or none."""

    __tablename__ = "alert_problem"
    id: int = Field(default=1, primary_key=True)
    text: str


class CheckFinding(SQLModel, table=True):
    """A health check's finding now, one per check and stream (the check's evidence joined), with when
    it was first and last seen; a finding no longer found is removed."""

    __tablename__ = "check_findings"
    code: str = Field(primary_key=True)
    stream: str = Field(primary_key=True)  # "" for the deployment
    severity: str
    title: str
    evidence: str
    remedy: str
    first_seen: datetime
    last_seen: datetime


class CheckRun(SQLModel, table=True):
    """The last evaluation of the checks: when, and the checks it could not run (JSON); one row."""

    __tablename__ = "check_run"
    id: int = Field(default=1, primary_key=True)
    time: datetime
    unchecked: str


class AuditHead(SQLModel, table=True):
    """The newest audit record the console wrote to a trail stream, and how many it wrote: outside the
    stream, where the account's clients cannot reach it."""
    __tablename__ = "audit_head"
    stream: str = Field(primary_key=True)
    seq: int
    hash: str
    written: int = 0


class AuditErasure(SQLModel, table=True):
    """An erasure of the trail found against the head: kept, so new records never make it read clean."""
    __tablename__ = "audit_erasure"
    id: int | None = Field(default=None, primary_key=True)
    stream: str
    found: datetime
    what: str
