"""The API's jobs (searches, a node's maintenance), each its caller's: kept a while once ended, within a
bound for each caller and one for all, so that no caller's jobs push out another's or fill the web's
memory. A caller is a token's own id or a user, never a name that can be given again after a revoke;
another caller is told there is no such job."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Generic, Iterator, TypeVar


@dataclass
class OwnedJob:
    owner: str
    ended_at: float | None = None  # time.monotonic() when it ended
    cancel: bool = False  # asked to stop (a job that cannot stop runs on, unseen)


J = TypeVar("J", bound=OwnedJob)


class JobStore(Generic[J]):
    def __init__(self, kept_for: float, most: int, most_each: int | None = None):
        self.kept_for, self.most, self.most_each = kept_for, most, most_each
        self._jobs: dict[str, J] = {}

    def add(self, job: J) -> str:
        """Room made for it first: among its caller's own jobs, then (the store full) among the jobs of
        the caller with the most."""
        self.forget()
        while self.most_each is not None and sum(j.owner == job.owner for j in self) >= self.most_each:
            self._drop_oldest(job.owner)
        while len(self._jobs) >= self.most:
            counts: dict[str, int] = {}
            for j in self:
                counts[j.owner] = counts.get(j.owner, 0) + 1
            self._drop_oldest(max(counts, key=lambda owner: counts[owner]))
        job_id = secrets.token_urlsafe(12)
        self._jobs[job_id] = job
        return job_id

    def of(self, owner: str, job_id: str) -> J | None:
        self.forget()
        job = self._jobs.get(job_id)
        return job if job is not None and job.owner == owner else None

    def forget(self) -> None:
        """Ended jobs past kept_for go."""
        now = time.monotonic()
        for job_id in [i for i, job in self._jobs.items() if job.ended_at and now - job.ended_at > self.kept_for]:
            del self._jobs[job_id]

    def __iter__(self) -> Iterator[J]:
        """Oldest first."""
        return iter(list(self._jobs.values()))

    def _drop_oldest(self, owner: str) -> None:
        """The caller's oldest ended job, else its oldest running one (asked to stop)."""
        own = [(i, job) for i, job in self._jobs.items() if job.owner == owner]
        job_id, job = next(((i, job) for i, job in own if job.ended_at), own[0])
        job.cancel = True
        del self._jobs[job_id]
