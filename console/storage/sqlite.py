"""SQLite through sqlmodel: WAL mode, and one transaction per job run (rows and offset together)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy.engine import Engine
from sqlalchemy import event, insert
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, SQLModel, create_engine, delete, tuple_

from console.config import private_dir
from console.storage.tables import JobOffset


def open_db(path: str | Path) -> Engine:
    path = Path(path)
    private_dir(path.parent)
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _pragmas(conn: Any, _: Any) -> None:  # readers (web app, notebooks) go on while the job writes
        conn.execute("PRAGMA busy_timeout=10000")  # first: turning a fresh file to WAL waits on the others too
        conn.execute("PRAGMA journal_mode=WAL")

    _make_schema(engine)
    return engine


_RACES = ("already exists", "duplicate column", "database is locked")


def _make_schema(engine: Engine, tries: int = 50) -> None:
    """The tables and columns missing, made. The parts `up` starts open a fresh file at once: each looks,
    then makes what it found missing, and a table or column another part made in between is looked at again.
    A read that WAL cannot turn into a write (another part wrote since) is told "locked" at once, busy
    timeout or not: that is looked at again too."""
    for attempt in range(tries):
        try:
            SQLModel.metadata.create_all(engine)
            _add_missing_columns(engine)
            return
        except OperationalError as e:
            if attempt == tries - 1 or not any(why in str(e) for why in _RACES):
                raise


def _add_missing_columns(engine: Engine) -> None:
    """A database made by an older console gets the columns added since (create_all only makes tables)."""
    with engine.begin() as conn:
        for table in SQLModel.metadata.sorted_tables:
            have = {row[1] for row in conn.exec_driver_sql(f"PRAGMA table_info({table.name})")}
            for column in table.columns:
                if column.name not in have:
                    default = getattr(column.default, "arg", None)  # a scalar default's value
                    kind = column.type.compile(dialect=engine.dialect)
                    tail = "" if default is None else f" NOT NULL DEFAULT {int(default) if isinstance(default, bool) else default!r}"
                    conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}{tail}")


def open_db_for_reading(path: str | Path) -> tuple[Engine | None, str | None]:
    """(engine, None), or (None, why) when the file cannot be opened or read: the pages that need no
    SQLite go on, and History says why it has nothing."""
    try:
        engine = open_db(path)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")
        return engine, None
    except Exception as e:  # corrupt, unwritable, not a database, a directory: all the same to the reader
        return None, f"no history: {path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:200]})"


def offset(engine: Engine, source: str) -> int:
    with Session(engine) as session:
        row = session.get(JobOffset, source)
        return row.seq if row else 0


def chunks(items: list[Any], size: int = 500) -> Iterable[list[Any]]:
    """`items` in lists of `size`: an IN (...) per list stays under SQLite's bound-parameter limit."""
    return (items[i:i + size] for i in range(0, len(items), size))


def insert_rows(session: Session, model: Any, rows: Iterable[dict[str, Any]], size: int = 1_000) -> None:
    """Insert rows (each with every column) a chunk at a time: no object per row, memory per chunk."""
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            session.exec(insert(model), params=chunk)
            chunk = []
    if chunk:
        session.exec(insert(model), params=chunk)


def replace_rows(session: Session, model: Any, key_columns: tuple[str, ...], keys: Iterable[tuple[Any, ...]],
                 rows: Iterable[dict[str, Any]]) -> None:
    """Delete the rows with these keys, insert the recomputed ones (same session, same transaction)."""
    columns = [getattr(model, c) for c in key_columns]
    for part in chunks(list(keys)):
        if len(columns) == 1:
            session.exec(delete(model).where(columns[0].in_([k[0] for k in part])))
        else:
            session.exec(delete(model).where(tuple_(*columns).in_(part)))
    insert_rows(session, model, rows)


def commit_run(engine: Engine, source: str, seq: int, writes: Any) -> None:
    """writes(session) replaces rows; the offset moves in the same transaction."""
    with Session(engine) as session:
        writes(session)
        current = session.get(JobOffset, source)
        now = datetime.now(timezone.utc)
        if current is None:
            session.add(JobOffset(source=source, seq=seq, updated=now))
        else:
            current.seq, current.updated = seq, now
        session.commit()
