"""The API's loss manifests: of each lost batch the caller's roles see, what exactly is missing, how sure
that is, what it rests on and what became of its repair (console.domain.manifests)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from console.api.callers import Caller
from console.api.context import SYSTEM, Context
from console.api.models import Time
from console.api.problems import ERRORS
from console.domain.manifests import Manifest
from console.queries.reads import SystemReads

STREAM_QUERY = Query(None, max_length=255, pattern=r"^[^\x00-\x20\x7f.*>/\\]+$")


class ManifestOut(BaseModel):
    id: str
    version: int
    stream: str
    batch: str
    kind: str = Field(description="atomic_abandoned, atomic_lost, fast_ended, fast_lost, fast_dropped, fast_gap, "
                                  "fast_error: the gravest loss of the batch")
    missing: list[list[int | None]] = Field(description="batch sequences [first, last]; last null: and every one "
                                                        "after (only its publisher knows how far it sent)")
    certainty: str = Field(description="exact, bounded (an end open), inferred (nobody answered)")
    rests_on: str
    time: datetime
    publisher: str | None
    state: str = Field(description="open, resent (not verified), repaired (every missing message read back "
                                   "once), partly, not_repairable")
    why: str
    resent: list[list[int | None]]
    found: list[list[int | None]]
    domain: str | None
    through: int | None


class ManifestsOut(BaseModel):
    manifests: list[ManifestOut]
    since: datetime


def _out(m: Manifest) -> ManifestOut:
    return ManifestOut(**{k: v for k, v in m.as_json().items() if k != "v"})


def manifests(ctx: Context) -> APIRouter:
    api = APIRouter(responses=ERRORS)

    @api.get("/manifests", response_model=ManifestsOut, tags=["manifests"])
    async def loss_manifests(who: Caller = ctx.caller, system: str | None = SYSTEM, stream: str | None = STREAM_QUERY,
                             since: Time | None = None) -> ManifestsOut:
        """Loss manifests, newest loss first (since a time; the last 24 h by default): what each lost batch
        is missing and its repair. The same rows as `batch-console manifests --format json`."""
        start = since or datetime.now(timezone.utc) - timedelta(hours=24)
        if start < datetime.now(timezone.utc) - timedelta(days=31):
            start = datetime.now(timezone.utc) - timedelta(days=31)  # the log is read kind by kind: a month at most
        found = await SystemReads(ctx.runtime_of(system), who.sight).manifests(start, stream)
        return ManifestsOut(manifests=[_out(m) for m in found], since=start)

    return api
