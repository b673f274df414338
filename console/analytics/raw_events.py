"""A step of a run's new events: read and written to the raw events table's directory by the executors,
summed up for the driver, which commits the files to Delta. No event passes through the driver: it
receives a row per date and task (and one per reason records were skipped), however many events."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from console.analytics.schema import SKIPPED_KIND
from console.analytics.transforms import LOSS_RETRACTED
from console.domain.events import NOT_HISTORY, STATUS_UNVERIFIED
from console.storage import delta

NOT_COUNTED = pa.array([kind.value for kind in NOT_HISTORY])

# What a task says of its part of a step: per date, its events (those an aggregate counts: `history`;
# of fast batches: `fast`; a retraction among them) and the file it wrote; per skip reason, how many.
STEP_SUMMARY = pa.schema([("date", pa.string()), ("events", pa.int64()), ("history", pa.int64()),
                          ("fast", pa.int64()), ("retractions", pa.bool_()), ("skipped_reason", pa.string()),
                          ("file", pa.string()), ("size", pa.int64()), ("records", pa.int64())])
STEP_SUMMARY_DDL = ("date string, events long, history long, fast long, retractions boolean, skipped_reason string, "
                    "file string, size long, records long")


def step_writer(raw_path: str, written: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs on a task's records: the events past `written` (what the table
    has) go to a file per date in `raw_path`; one summary batch comes out."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = delta.DateFiles(Path(raw_path))
        facts, skipped = [], Counter[str]()
        for batch in batches:
            records = pa.Table.from_batches([batch])
            is_skipped = pc.equal(records["kind"], SKIPPED_KIND)
            for c in pc.value_counts(records.filter(is_skipped)["reason"]):
                skipped[c["values"].as_py()] += c["counts"].as_py()
            events = records.filter(pc.invert(is_skipped))
            kind = events["kind"]
            facts.append(pa.table({
                "date": delta.partition_dates(events),
                "history": pc.cast(pc.invert(pc.is_in(kind, value_set=NOT_COUNTED)), pa.int64()),
                "fast": pc.cast(pc.and_(pc.starts_with(kind, "fast_"), pc.is_valid(events["batch_id"])), pa.int64()),
                "retraction": pc.equal(kind, LOSS_RETRACTED),
            }))
            files.write(events.filter(pc.greater(events["seq"], written)))
        by_file = {f.date: f for f in files.close()}
        rows = [{"skipped_reason": reason, "events": n} for reason, n in skipped.items()]
        if facts:
            per_day = pa.concat_tables(facts).group_by("date").aggregate(
                [("history", "count"), ("history", "sum"), ("fast", "sum"), ("retraction", "any")])
            for day in per_day.to_pylist():
                f = by_file.get(day["date"])
                rows.append({"date": day["date"], "events": day["history_count"], "history": day["history_sum"],
                             "fast": day["fast_sum"], "retractions": day["retraction_any"],
                             "file": f and f.path, "size": f and f.size, "records": f and f.records})
        yield pa.RecordBatch.from_pylist(rows, STEP_SUMMARY)

    return write


@dataclass
class NewEvents:
    """What the recompute needs to know of a run's new events, gathered step by step."""

    count: int = 0
    history: int = 0  # events that can change an aggregate (the collector's heartbeat changes none)
    fast: int = 0  # events of fast batches
    skipped: Counter[str] = field(default_factory=Counter)  # records of the log that were not events, by reason
    days: set[date] = field(default_factory=set)
    retractions: bool = False

    @property
    def key_wrong(self) -> bool:
        """The collector's statuses came and none verified: the job's key is not the collector's."""
        return self.skipped[STATUS_UNVERIFIED] >= 1 and self.count == self.history

    def add(self, summary: pa.Table) -> list[delta.DataFile]:
        """Take in one step's summary; returns the files its tasks wrote."""
        files = []
        for row in summary.to_pylist():
            if row["skipped_reason"] is not None:
                self.skipped[row["skipped_reason"]] += row["events"]
                continue
            self.count += row["events"]
            self.history += row["history"]
            self.fast += row["fast"]
            self.retractions = self.retractions or row["retractions"]
            self.days.add(date.fromisoformat(row["date"]))
            if row["file"] is not None:
                files.append(delta.DataFile(row["file"], row["date"], row["size"], row["records"]))
        return files
