"""The audit trail's checkpoint in the console's SQLite: the head of the chain (the newest record the
console wrote, its hash, how many records it wrote) and every erasure found against it. The trail's
stream can be purged, deleted or truncated by any client of the account; this file only by whoever
holds the console's data directory."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import case, literal
from sqlalchemy.dialects.sqlite import insert
from sqlmodel import Session, col, select

from console.domain.audit import Head
from console.storage.sqlite import open_db
from console.storage.tables import AuditErasure, AuditHead

KEPT_ERASURES = 1000


class AuditCheckpoint:
    def __init__(self, path: str | Path, stream: str):
        self.engine = open_db(path)
        self.stream = stream

    def head(self) -> Head | None:
        with Session(self.engine) as s:
            row = s.get(AuditHead, self.stream)
            return Head(row.seq, row.hash, row.written) if row else None

    def advance(self, seq: int, hash: str, restart: bool = False) -> None:
        """One more record written at `seq`: the head moves forward only (two processes write the same
        trail), unless `restart` (the trail was erased and begins again, the erasure kept)."""
        moves = literal(restart) | (AuditHead.seq < seq)
        row = insert(AuditHead).values(stream=self.stream, seq=seq, hash=hash, written=1)
        row = row.on_conflict_do_update(index_elements=["stream"], set_={
            "seq": case((moves, seq), else_=AuditHead.seq), "hash": case((moves, hash), else_=AuditHead.hash),
            "written": AuditHead.written + 1})
        with self.engine.begin() as conn:
            conn.execute(row)

    def erased(self, what: str) -> None:
        """An erasure found (once: found again, it is not added again)."""
        with Session(self.engine) as s:
            if s.exec(select(AuditErasure).where(AuditErasure.stream == self.stream,
                                                 AuditErasure.what == what)).first() is None:
                s.add(AuditErasure(stream=self.stream, found=datetime.now(timezone.utc), what=what[:1000]))
                s.commit()

    def erasures(self) -> list[tuple[datetime, str]]:
        with Session(self.engine) as s:
            rows = s.exec(select(AuditErasure).where(AuditErasure.stream == self.stream)
                          .order_by(col(AuditErasure.id)).limit(KEPT_ERASURES)).all()
            return [(r.found, r.what) for r in rows]
