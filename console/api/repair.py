"""The API's side of a repair: the loss manifests (of each lost batch the caller's roles see, what exactly
is missing, how sure that is, what it rests on and what became of its repair: console.domain.manifests),
and publishing from the console (one message; stored messages again), each the action a page runs."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from console.api.callers import Caller
from console.api.context import SYSTEM, Context
from console.api.models import STREAM, Time
from console.api.problems import ERRORS, Problem
from console.commands import PublishMessage, RepublishMessages
from console.domain.manifests import Manifest
from console.domain.publishing import MAX_HEADER_VALUE, MAX_HEADERS, MAX_PAYLOAD, MAX_REPUBLISH
from console.queries.reads import SystemReads

SUBJECT = r"^[^\s.*>$\x00-\x1f\x7f][^\s.*>\x00-\x1f\x7f]*(\.[^\s.*>\x00-\x1f\x7f]+)*$"  # no $ subject, no wildcard
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
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


class PublishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str = Field(min_length=1, max_length=255, pattern=SUBJECT,
                         description="a subject of the stream (no wildcard, no $ subject)")
    data: str | None = Field(None, max_length=MAX_PAYLOAD, description="the payload as text (UTF-8); the API's "
                             "bodies are 64 KiB at most: a larger payload goes by `batch-console publish --data-file`")
    data_base64: str | None = Field(None, max_length=MAX_PAYLOAD * 4 // 3 + 4, pattern=BASE64, description="or as base64")
    headers: dict[str, str] = Field(default_factory=dict, max_length=MAX_HEADERS,
                                    description=f"names to values ({MAX_HEADER_VALUE} characters at most each)")


class RepublishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    first: int = Field(ge=1, le=2 ** 53 - 1)
    last: int = Field(ge=1, le=2 ** 53 - 1, description=f"{MAX_REPUBLISH} messages at most in all")
    to_subject: str = Field(min_length=1, max_length=255, pattern=SUBJECT)
    to_stream: str | None = Field(None, min_length=1, max_length=255, description="default: the same stream")


def _out(m: Manifest) -> ManifestOut:
    return ManifestOut(**{k: v for k, v in m.as_json().items() if k != "v"})


def repair(ctx: Context) -> APIRouter:
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

    async def act(system: str | None, who: Caller, command: Any) -> Any:
        return await ctx.acting(who.actions(ctx.runtime_of(system)).run(command), command.name)

    @api.post("/streams/{stream}/messages", tags=["repair"])
    async def publish_message(stream: STREAM, body: PublishIn, who: Caller = ctx.caller,
                              system: str | None = SYSTEM) -> dict[str, Any]:
        """The action message.publish: one message with headers on a subject of the stream; the server's
        PubAck (a refusal: 409 with its code)."""
        if body.data is not None and body.data_base64 is not None:
            raise Problem(422, "One payload", "data or data_base64, not both")
        try:
            payload = base64.b64decode(body.data_base64, validate=True) if body.data_base64 is not None else \
                (body.data or "").encode()
        except (binascii.Error, ValueError):
            raise Problem(422, "Not base64", "data_base64 does not decode") from None
        if len(payload) > MAX_PAYLOAD:
            raise Problem(422, "Too large", f"{MAX_PAYLOAD:,} bytes at most")
        try:
            command = PublishMessage(ctx.stream_name(stream), body.subject, payload, tuple(body.headers.items()))
            ack = await act(system, who, command)
        except ValueError as e:
            raise Problem(422, "Not published", str(e)[:300]) from None
        return {"stream": ack.stream, "seq": ack.seq, "duplicate": ack.duplicate}

    @api.post("/streams/{stream}/republish", tags=["repair"])
    async def republish_messages(stream: STREAM, body: RepublishIn, who: Caller = ctx.caller,
                                 system: str | None = SYSTEM) -> dict[str, Any]:
        """The action message.republish: stored messages first..last again on a subject of a stream; the
        server's answer for each."""
        if body.last < body.first or body.last - body.first >= MAX_REPUBLISH:
            raise Problem(422, "Not a range", f"first <= last, {MAX_REPUBLISH} messages at most")
        try:
            command = RepublishMessages(ctx.stream_name(stream), body.first, body.last,
                                        ctx.stream_name(body.to_stream or stream), body.to_subject)
            done = await act(system, who, command)
        except ValueError as e:
            raise Problem(422, "Not republished", str(e)[:300]) from None
        return {"messages": [{"seq": r.seq, "stored_as": r.stored_as, "duplicate": r.duplicate, "problem": r.problem}
                             for r in done]}

    return api
