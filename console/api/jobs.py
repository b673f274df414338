"""Searches as jobs for the API: POST starts one (the action search.run, as the Search page's, with its
limits and its masking for the token's role), GET reads its progress and the matches so far, DELETE
cancels it. A job is its token's: another token is told there is none. Ended jobs are kept a while,
the newest MAX_JOBS at most."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from console.actions import Actions
from console.commands import RunSearch
from console.domain.search import Found, SearchProgress, SearchQuery

MAX_JOBS = 100
KEPT_FOR = 600.0  # seconds an ended job's matches are kept for its token to read


def _whole(value: object) -> object:
    """A whole number as JSON may write it (125 or 125.0), and never a string or a truth value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("a whole number")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("a whole number")
        return int(value)
    return value


def _number(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("a number")
    try:
        return float(value)
    except OverflowError:  # an int no float holds (JSON's 1 and 400 zeros): refused, not a 500
        raise ValueError("a number a float holds") from None


Whole = Annotated[int, BeforeValidator(_whole)]
Number = Annotated[float, BeforeValidator(_number)]


class SearchIn(BaseModel):
    """A search, as the Search page and `batch-console search` take it (the same limits)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # the numbers read by _whole and _number
    stream: str = Field(max_length=255, pattern=r"^[^\x00-\x20\x7f.*>/\\]+$")
    subject: str = Field("", max_length=255)
    where: str = Field("", max_length=1000, description="a CEL expression over payload, headers, subject, seq")
    direction: Literal["oldest", "newest"] = "oldest"
    max_scanned: Whole = Field(100_000, ge=1, le=1_000_000)
    max_matches: Whole = Field(100, ge=1, le=1000)
    max_seconds: Number = Field(30.0, ge=0.1, le=60.0)


class MatchOut(BaseModel):
    seq: int
    subject: str
    time: datetime
    headers: list[tuple[str, str]]
    data_base64: str


class SearchOut(BaseModel):
    id: str
    state: Literal["running", "done", "cancelled", "refused"]
    scanned: int
    matched: int
    stopped_by: str | None
    detail: str = ""
    matches: list[MatchOut]


@dataclass
class Job:
    token: str
    query: SearchQuery | None  # None: refused before it could be one
    progress: SearchProgress = field(default_factory=SearchProgress)
    matches: list[Found] = field(default_factory=list)
    task: asyncio.Task[Any] | None = None
    cancel: bool = False
    refused: str = ""
    ended_at: float | None = None

    def out(self, job_id: str) -> SearchOut:
        state: Literal["running", "done", "cancelled", "refused"] = "refused" if self.refused else \
            "cancelled" if self.cancel and self.ended_at else "done" if self.ended_at else "running"
        return SearchOut(id=job_id, state=state, scanned=self.progress.scanned, matched=self.progress.matched,
                         stopped_by=self.progress.stopped_by, detail=self.refused,
                         matches=[MatchOut(seq=f.seq, subject=f.subject, time=f.time, headers=list(f.headers),
                                           data_base64=base64.b64encode(f.data).decode()) for f in self.matches])


class Jobs:
    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def refused(self, token: str, why: str) -> str:
        """A search that cannot run (an expression that does not compile, a name the server refuses): a job
        that says so, as a search refused while it runs does."""
        self._forget()
        job_id = secrets.token_urlsafe(12)
        self._jobs[job_id] = Job(token, None, refused=why[:500], ended_at=time.monotonic())
        return job_id

    def start(self, token: str, query: SearchQuery, actions: Actions) -> str:
        self._forget()
        job_id = secrets.token_urlsafe(12)
        job = self._jobs[job_id] = Job(token, query)

        def progress(state: SearchProgress) -> None:
            job.progress = state

        async def run() -> None:
            try:
                on_match = job.matches.append if query.direction == "oldest" else None  # newest: ordered at the end
                matches, job.progress = await actions.run(RunSearch(query, progress, lambda: job.cancel, on_match))
                if on_match is None:  # oldest first, they came one by one; newest first, ordered only now
                    job.matches = matches
            except Exception as e:  # refused (role, busy, a bad expression): said in the job
                job.refused = str(e)[:500] or type(e).__name__
            finally:
                job.ended_at = time.monotonic()

        job.task = asyncio.create_task(run(), name=f"api search {job_id}")
        return job_id

    def of(self, token: str, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job.token == token else None

    def _forget(self) -> None:
        now = time.monotonic()
        for job_id in [j for j, job in self._jobs.items() if job.ended_at and now - job.ended_at > KEPT_FOR]:
            del self._jobs[job_id]
        while len(self._jobs) >= MAX_JOBS:
            oldest = next(iter(self._jobs))
            self._jobs.pop(oldest).cancel = True
