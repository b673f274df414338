"""Loss budgets: objectives per stream pattern (and, optionally, per publisher) read strictly from a TOML
file, and what the SRE workbook derives from one: over its window, the budget it allows, how much of it
the losses spent, and the burn rate over shorter windows that multi-window alerts pair.

    [[objective]]
    name = "orders"
    streams = ["ORDERS*"]                  # globs of stream names
    publishers = ["order-svc*"]            # optional: globs of the publisher's client name ("name version")
    lost_messages_per_million = 10         # at most this many lost of every 1,000,000 published
    lost_batches_per_thousand = 1          # at most this many lost of every 1,000 batches
    window = "28d"                         # the budget's window (default 28d)

An objective's error rate is lost / (published): lost messages over messages stored plus lost, lost batches
over batches seen. The burn rate over a window is that window's error rate over the objective's; a burn
rate of 1 spends exactly the budget over the objective's window. A rate with nothing published in its
window is not known, never zero or infinite.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from console.domain.events import COLLECTOR, BatchEvent, EventKind
from console.domain.toml_text import FileRefused, duration, read_toml, with_lines

KEYS = {"name", "streams", "publishers", "lost_messages_per_million", "lost_batches_per_thousand", "window"}
MAX_OBJECTIVES = 200
DEFAULT_WINDOW = timedelta(days=28)
# The windows every objective is measured over: the SRE workbook's alert pairs and the budget's own.
WINDOWS = {"5m": timedelta(minutes=5), "30m": timedelta(minutes=30), "1h": timedelta(hours=1),
           "2h": timedelta(hours=2), "6h": timedelta(hours=6), "1d": timedelta(days=1), "3d": timedelta(days=3)}
# (long window, short window, burn rate at or above which both must be, severity): the workbook's
# defaults for a 30-day budget: 2% of it in an hour, 5% in six hours (pages); 10% in a day or three (tickets).
BURN_PAIRS = (("1h", "5m", 14.4, "critical"), ("6h", "30m", 6.0, "critical"),
              ("1d", "2h", 3.0, "warning"), ("3d", "6h", 1.0, "warning"))
MEASURES = ("messages", "batches")


class ObjectivesError(FileRefused):
    """An objectives file the console refuses."""


@dataclass(frozen=True)
class Objective:
    name: str
    streams: tuple[str, ...]
    publishers: tuple[str, ...] = ()
    lost_messages_per_million: float | None = None
    lost_batches_per_thousand: float | None = None
    window: timedelta = DEFAULT_WINDOW
    line: int = field(default=0, compare=False)

    def covers(self, stream: str | None, publisher: str | None = None) -> bool:
        """Whether a loss (or a count) on this stream, by this publisher, counts against the objective.
        An objective that names publishers counts only what a named publisher did."""
        if not any(fnmatch.fnmatchcase(stream or "", glob) for glob in self.streams):
            return False
        return not self.publishers or (publisher is not None and
                                       any(fnmatch.fnmatchcase(publisher, glob) for glob in self.publishers))

    def allowed(self, measure: str) -> float | None:
        """The error rate the objective allows for `measure` (messages | batches), or None."""
        if measure == "messages":
            return None if self.lost_messages_per_million is None else self.lost_messages_per_million / 1e6
        return None if self.lost_batches_per_thousand is None else self.lost_batches_per_thousand / 1e3


def parse_objectives(text: str) -> list[Objective]:
    """The objectives of a file, or ObjectivesError with its line."""
    data = read_toml(text, ObjectivesError)
    if unknown := set(data) - {"objective"}:
        raise ObjectivesError(f"unknown table or key {sorted(unknown)[0]!r} (objectives are [[objective]] tables)")
    tables = data.get("objective", [])
    if not isinstance(tables, list):
        raise ObjectivesError("objective must be an array of tables: [[objective]]")
    if len(tables) > MAX_OBJECTIVES:
        raise ObjectivesError(f"at most {MAX_OBJECTIVES} objectives")
    found, names = [], set()
    for table, line in with_lines(text, "objective", tables):
        objective = _objective(table, line)
        if objective.name in names:
            raise ObjectivesError(f"two objectives are named {objective.name!r}", line)
        names.add(objective.name)
        found.append(objective)
    return found


def _objective(table: Any, line: int | None) -> Objective:
    if not isinstance(table, dict):
        raise ObjectivesError("an objective is a table", line)
    if extra := set(table) - KEYS:
        raise ObjectivesError(f"unknown key {sorted(extra)[0]!r}", line)
    name = table.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 100 or not name.isprintable():
        raise ObjectivesError("every objective needs a name (1-100 printable characters)", line)
    streams = _globs(table.get("streams"), "streams", line, required=True)
    publishers = _globs(table.get("publishers", []), "publishers", line)
    messages = _rate(table.get("lost_messages_per_million"), "lost_messages_per_million", 1e6, line)
    batches = _rate(table.get("lost_batches_per_thousand"), "lost_batches_per_thousand", 1e3, line)
    if messages is None and batches is None:
        raise ObjectivesError("an objective needs lost_messages_per_million or lost_batches_per_thousand", line)
    window = duration(table["window"], "window", line, ObjectivesError) if "window" in table else DEFAULT_WINDOW
    if not timedelta(days=1) <= window <= timedelta(days=90):
        raise ObjectivesError("window must be from 1d to 90d", line)
    return Objective(name, streams, publishers, messages, batches, window, line or 0)


def _globs(value: object, key: str, line: int | None, required: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or (required and not value) or len(value) > 100 or not all(
            isinstance(v, str) and 0 < len(v) <= 256 and v.isprintable() for v in value):
        raise ObjectivesError(f"{key} must be a list of {'one or more ' if required else ''}globs", line)
    return tuple(value)


def _rate(value: object, key: str, per: float, line: int | None) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 < value < per:  # type: ignore[operator]  # checked just before
        raise ObjectivesError(f"{key} must be a number above 0 and below {per:,.0f}", line)
    return float(value)  # type: ignore[arg-type]  # an int or a float, checked above


@dataclass(frozen=True)
class Counts:
    """One objective's counts over one window."""

    lost: int = 0
    total: int = 0  # published: stored plus lost (messages), or seen (batches)
    known: bool = True  # False: not counted (atomic batches, or a lost one's messages, without the publish side)


def burn_rate(counts: Counts, allowed: float) -> float | None:
    """The window's error rate over the allowed one; None when nothing was published or it is not known."""
    if not counts.known or counts.total <= 0:
        return None
    return (counts.lost / counts.total) / allowed


def spent(counts: Counts, allowed: float) -> float | None:
    """The fraction of the budget the window's losses spent (1: all of it); None when not known."""
    if not counts.known or counts.total <= 0:
        return None
    return counts.lost / (allowed * counts.total)


def burning(burns: dict[str, float | None]) -> tuple[str, str, str, float] | None:
    """The first SRE workbook pair whose long and short windows both burn at or above its rate:
    (long, short, severity, the lower of the two burn rates); None when none does."""
    for long, short, rate, severity in BURN_PAIRS:
        a, b = burns.get(long), burns.get(short)
        if a is not None and b is not None and a >= rate and b >= rate:
            return long, short, severity, min(a, b)
    return None


@dataclass(frozen=True)
class CountRow:
    """One bucket's counts for a stream and publisher (console.analytics.budgets)."""

    bucket: datetime
    stream: str
    publisher: str  # "" for what no publisher is known of (a stream's stored messages)
    stored: int = 0
    fast_stored: int = 0
    lost_messages: int = 0
    batches: int = 0
    lost_batches: int = 0
    atomic_uncounted: int = 0
    atomic_batches: int = 0  # a publisher's atomic batches (rows of one publisher; a stream's are in batches)
    atomic_stored: int = 0  # the messages their commits stored
    publisher_uncounted: int = 0  # atomic losses of this publisher, whose atomic batches nobody counted
    atomic_unsized: int = 0  # atomic losses whose messages nobody counted (the publish side not tapped)


@dataclass(frozen=True)
class BudgetStatus:
    """One objective's measure as of a moment: its budget window's counts, what they spent, and the
    burn rate over each of WINDOWS (None: nothing published there, or not known)."""

    objective: str
    measure: str  # messages | batches
    allowed: float  # the error rate the objective allows
    window: timedelta
    counts: Counts
    burns: dict[str, float | None]
    as_of: datetime

    @property
    def spent(self) -> float | None:
        return spent(self.counts, self.allowed)

    @property
    def remaining(self) -> float | None:
        used = self.spent
        return None if used is None else 1.0 - used

    @property
    def burning(self) -> tuple[str, str, str, float] | None:
        return burning(self.burns)


def allowed_text(status: BudgetStatus) -> str:
    per = (f"{status.allowed * 1e6:g} per million" if status.measure == "messages"
           else f"{status.allowed * 1e3:g} per thousand")
    return f"{per} over {status.window.days}d"


def state_of(status: BudgetStatus) -> str:
    """What an on-call engineer reads first: spent, burning (on which pair), not known, or within."""
    used = status.spent
    if not status.counts.known:
        what = "a lost atomic batch's messages" if status.measure == "messages" else "atomic batches"
        return f"not known: {what} not counted (tap the publish side)"
    if used is None:
        return "not known: nothing published in the window"
    if used >= 1:
        return "SPENT"
    if (pair := status.burning) is not None:
        long, short, severity, rate = pair
        return f"burning {rate:.1f}x over {long} and {short} ({'page' if severity == 'critical' else 'ticket'})"
    return "within"


def counts_of(objective: Objective, measure: str, rows: list[CountRow]) -> Counts:
    """The objective's counts of `measure` over these rows (those it covers)."""
    by_publisher = bool(objective.publishers)
    mine = [r for r in rows if (r.publisher or not by_publisher) and objective.covers(r.stream, r.publisher or None)]
    if measure == "messages":
        lost = sum(r.lost_messages for r in mine)
        stored = sum(r.fast_stored + r.atomic_stored if by_publisher else r.stored for r in mine)
        return Counts(lost, stored + lost, known=not any(r.atomic_unsized for r in mine))
    lost = sum(r.lost_batches for r in mine)
    seen = sum(r.batches + (r.atomic_batches if by_publisher else 0) for r in mine)
    uncounted = sum(r.publisher_uncounted if by_publisher else r.atomic_uncounted for r in mine)
    return Counts(lost, max(lost, seen), known=not uncounted)


def budget_statuses(objectives: list[Objective], rows: list[CountRow], as_of: datetime) -> list[BudgetStatus]:
    """Each objective's measures as of `as_of`, from the count rows of its longest window at least."""
    found = []
    for objective in objectives:
        for measure in MEASURES:
            allowed = objective.allowed(measure)
            if allowed is None:
                continue

            def within(span: timedelta) -> list[CountRow]:
                return [r for r in rows if as_of - span <= r.bucket <= as_of]

            burns = {name: burn_rate(counts_of(objective, measure, within(span)), allowed)
                     for name, span in WINDOWS.items()}
            found.append(BudgetStatus(objective.name, measure, allowed, objective.window,
                                      counts_of(objective, measure, within(objective.window)), burns, as_of))
    return found


TOTALS_CHUNK = 40_000  # characters of stream totals in one event (an event is at most 64 KiB)
TOTALS_KEYS = ("last_seq", "atomic", "atomic_publishers")


def totals_events(instance: str, time: datetime, last_seqs: dict[str, int], atomic: dict[str, int],
                  atomic_publishers: dict[str, dict[str, list[int]]] | None = None) -> list[BatchEvent]:
    """The streams' last sequences, the atomic batches seen open on each, and per publisher the atomic
    batches and the messages their commits stored (all cumulative), in as many STREAM_TOTALS events as
    they take."""
    events: list[BatchEvent] = []
    part: dict[str, dict[str, Any]] = {key: {} for key in TOTALS_KEYS}
    size = 0
    items: list[tuple[str, str, Any]] = [("last_seq", s, n) for s, n in sorted(last_seqs.items())] + \
        [("atomic", s, n) for s, n in sorted(atomic.items())] + \
        [("atomic_publishers", s, {p: list(c) for p, c in by.items()}) for s, by in sorted((atomic_publishers or {}).items())]
    for key, stream, value in items:
        part[key][stream] = value
        size += len(stream) + 24 + (sum(len(p) + 48 for p in value) if isinstance(value, dict) else 0)
        if size >= TOTALS_CHUNK:
            events.append(_totals(instance, time, len(events), part))
            part, size = {key: {} for key in TOTALS_KEYS}, 0
    if size or not events:
        events.append(_totals(instance, time, len(events), part))
    return events


def _totals(instance: str, time: datetime, index: int, part: dict[str, dict[str, Any]]) -> BatchEvent:
    detail = json.dumps({"instance": instance, **part}, separators=(",", ":"))
    return BatchEvent(f"totals.{instance}.{time.timestamp():.0f}.{index}", EventKind.STREAM_TOTALS, time,
                      detail=detail, source=COLLECTOR)
