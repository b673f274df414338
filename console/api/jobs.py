"""Searches as jobs for the API: POST starts one (the action search.run, as the Search page's, with its
limits and its masking for the token's role), GET reads its progress and the matches so far, DELETE
cancels it. A job is its caller's, kept within bounds (console.api.job_store); the matches of ended jobs
within byte budgets for each caller and for all."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from console.actions import Actions
from console.api.job_store import JobStore, OwnedJob
from console.commands import RunSearch
from console.domain.search import Found, SearchProgress, SearchQuery

MAX_JOBS = 100  # in the console, of every caller
MAX_JOBS_EACH = 10  # of one caller (a token, a user): its own oldest go first, never another's
KEPT_FOR = 600.0  # seconds an ended job's matches are kept for its caller to read
MAX_KEPT_EACH = 16 << 20  # bytes of matches (payloads and headers) kept for one caller's ended jobs
MAX_KEPT = 64 << 20  # bytes of matches kept for every caller's ended jobs
CAPPED = f"stopped: its matches reached {MAX_KEPT_EACH >> 20} MiB, what the console keeps of one caller's searches"
DROPPED = "its matches were let go to keep the console's memory: read a search's matches when it ends, or search again"


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


def match_size(found: Found) -> int:
    """Bytes one match holds: its payload, headers and subject."""
    return len(found.data) + sum(len(k) + len(v) for k, v in found.headers) + len(found.subject)


@dataclass
class Job(OwnedJob):
    query: SearchQuery | None = None  # None: refused before it could be one
    progress: SearchProgress = field(default_factory=SearchProgress)
    matches: list[Found] = field(default_factory=list)
    task: asyncio.Task[Any] | None = None
    refused: str = ""
    dropped: bool = False
    capped: bool = False  # its matches reached MAX_KEPT_EACH: stopped there

    def kept(self) -> int:
        """Bytes its matches hold."""
        return sum(map(match_size, self.matches))

    def out(self, job_id: str) -> SearchOut:
        state: Literal["running", "done", "cancelled", "refused"] = "refused" if self.refused else \
            "cancelled" if self.cancel and self.ended_at and not self.capped else "done" if self.ended_at else "running"
        return SearchOut(id=job_id, state=state, scanned=self.progress.scanned, matched=self.progress.matched,
                         stopped_by=self.progress.stopped_by, detail=self.refused or (DROPPED if self.dropped else CAPPED if self.capped else ""),
                         matches=[MatchOut(seq=f.seq, subject=f.subject, time=f.time, headers=list(f.headers),
                                           data_base64=base64.b64encode(f.data).decode()) for f in self.matches])


class Jobs:
    def __init__(self) -> None:
        self._jobs: JobStore[Job] = JobStore(KEPT_FOR, MAX_JOBS, MAX_JOBS_EACH)

    def refused(self, owner: str, why: str) -> str:
        """A search that cannot run (an expression that does not compile, a name the server refuses): a job
        that says so, as a search refused while it runs does."""
        job_id = self._jobs.add(Job(owner, refused=why[:500], ended_at=time.monotonic()))
        self._within_budgets()
        return job_id

    def start(self, owner: str, query: SearchQuery, actions: Actions) -> str:
        job = Job(owner, query=query)
        job_id = self._jobs.add(job)
        self._within_budgets()

        def progress(state: SearchProgress) -> None:
            job.progress = state

        kept = [0]

        def keep(found: Found) -> bool:
            """Kept while the job's matches are within its caller's budget; past it the search is stopped."""
            size = match_size(found)
            if kept[0] + size > MAX_KEPT_EACH:
                job.capped = job.cancel = True
                return False
            kept[0] += size
            return True

        def on_each(found: Found) -> None:
            if keep(found):
                job.matches.append(found)

        async def run() -> None:
            try:
                on_match = on_each if query.direction == "oldest" else None  # newest: ordered at the end
                matches, job.progress = await actions.run(RunSearch(query, progress, lambda: job.cancel, on_match))
                if on_match is None:  # oldest first, they came one by one; newest first, ordered only now
                    job.matches = [found for found in matches if keep(found)]
            except Exception as e:  # refused (role, busy, a bad expression): said in the job
                job.refused = str(e)[:500] or type(e).__name__
            finally:
                job.ended_at = time.monotonic()

        job.task = asyncio.create_task(run(), name=f"api search {job_id}")
        return job_id

    def of(self, owner: str, job_id: str) -> Job | None:
        found = self._jobs.of(owner, job_id)
        self._within_budgets()
        return found

    def _within_budgets(self) -> None:
        """Matches past the byte budgets are let go, the oldest ended first, each job saying so."""
        ended = [job for job in self._jobs if job.ended_at and job.matches]
        sizes = {id(job): job.kept() for job in ended}
        each: dict[str, int] = {}
        for job in ended:
            each[job.owner] = each.get(job.owner, 0) + sizes[id(job)]
        total = sum(each.values())
        for job in ended:  # oldest first
            if total <= MAX_KEPT and each[job.owner] <= MAX_KEPT_EACH:
                continue
            if each[job.owner] > MAX_KEPT_EACH or total > MAX_KEPT:
                each[job.owner] -= sizes[id(job)]
                total -= sizes[id(job)]
                job.matches, job.dropped = [], True
