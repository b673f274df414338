"""The parts `up` starts open one SQLite file at once on a fresh data directory: each makes the schema it
finds missing, and none fails on a table or column another made a moment before."""

import multiprocessing
from pathlib import Path

import pytest
from sqlalchemy import inspect

from console.storage.sqlite import open_db
from tests.soak import repeats

PARTS = 6


def _open(path: str, start, errors) -> None:
    start.wait()
    try:
        open_db(path).dispose()
    except Exception as e:  # what a part would have died of
        errors.put(f"{type(e).__name__}: {str(e).splitlines()[0]}")


@pytest.mark.parametrize("runs", repeats(2, 10))
def test_parts_opening_a_fresh_database_at_once_all_get_the_schema(tmp_path: Path, runs: int):
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    for run in range(runs):
        path = str(tmp_path / f"console{run}.db")
        start = context.Barrier(PARTS)
        parts = [context.Process(target=_open, args=(path, start, errors)) for _ in range(PARTS)]
        for part in parts:
            part.start()
        for part in parts:
            part.join(60)
        assert all(part.exitcode == 0 for part in parts)
        found = []
        while not errors.empty():
            found.append(errors.get())
        assert found == [], f"run {run}: {found}"
        assert "abandonment_hourly" in inspect(open_db(path)).get_table_names()
