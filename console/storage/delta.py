"""History in Delta tables through deltalake (delta-rs), idempotent under reruns.

Raw events are appended with an app transaction whose version is the last event-log sequence
they cover: a rerun appends only what is past it. Aggregates replace the rows of the keys a run
recomputed (one commit, overwrite with a predicate), so writing them twice changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

APP_ID = "batch-console-analytics"


def table(path: Path) -> DeltaTable | None:
    try:
        return DeltaTable(str(path))
    except TableNotFoundError:
        return None


def written_up_to(path: Path) -> int:
    """The last event-log sequence already appended to the raw events table (0: none)."""
    dt = table(path)
    if dt is None:
        return 0
    return dt.transaction_version(APP_ID) or 0


def append_events(path: Path, events: pa.Table, up_to_seq: int) -> int:
    """Append the events past what the table already has; returns how many were appended."""
    done = written_up_to(path)
    if done >= up_to_seq:
        return 0
    fresh = events.filter(pc.greater(events["seq"], done))
    fresh = fresh.append_column("date", pc.strftime(fresh["time"], format="%Y-%m-%d"))
    write_deltalake(
        str(path), fresh, mode="append", partition_by=["date"], schema_mode="merge",  # new columns join
        commit_properties=CommitProperties(app_transactions=[Transaction(APP_ID, up_to_seq)]),
    )
    return fresh.num_rows


def replace_where(path: Path, rows: pa.Table, predicate: str | None) -> None:
    """Rows matching `predicate` are replaced by `rows` in one commit; None: the table is rewritten."""
    if predicate is None or table(path) is None:
        write_deltalake(str(path), rows, mode="overwrite", schema_mode="overwrite")
    else:  # a table written before a column existed takes it on
        write_deltalake(str(path), rows, mode="overwrite", predicate=predicate, schema_mode="merge")


def read_files(path: Path, partition_filters=None) -> list[str]:
    """Parquet file URIs of the current version, for Spark (never the bare directory)."""
    dt = table(path)
    return [] if dt is None else dt.file_uris(file_pruning_predicate=partition_filters)


def compact(path: Path, dates: list[str], most_files: int = 32, keep_hours: int = 1) -> list[str]:
    """Rewrite each date partition of more than `most_files` files into one, then delete the files no
    version of the last `keep_hours` uses. A run under --follow appends one small file: left alone,
    a day would hold thousands and every run reads two days of them back. Returns the dates
    compacted."""
    dt = table(path)
    if dt is None:
        return []
    crowded = [d for d in dates if len(dt.file_uris(file_pruning_predicate=[("date", "=", d)])) > most_files]
    for d in crowded:
        dt.optimize.compact(partition_filters=[("date", "=", d)])
    if crowded:
        vacuum(path, keep_hours)
    return crowded


def vacuum(path: Path, keep_hours: int = 1) -> None:
    """Delete the files no version of the last `keep_hours` uses (a reader of an older version has
    that long to finish)."""
    if (dt := table(path)) is not None:
        dt.vacuum(retention_hours=keep_hours, dry_run=False, enforce_retention_duration=False)
