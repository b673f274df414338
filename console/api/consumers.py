"""The API's consumers: every consumer's lag and state (the Consumers page's rows, of the streams the
caller's roles read), and the changes to one (pause, resume, reset, unpin, delete), each the action a
page runs: one role check, one write-ahead audit record naming the caller, the server's refusal as 409."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from console.api.callers import Caller
from console.api.context import SYSTEM, Context
from console.api.models import STREAM, Time
from console.api.problems import ERRORS, Problem
from console.commands import DeleteConsumer, PauseConsumer, ResetConsumer, ResumeConsumer, UnpinConsumer
from console.queries.consumers import SeenConsumers

CONSUMER = Annotated[str, Path(pattern=r"^[^\x00-\x20\x7f.*>/\\]+$", max_length=256)]
DOMAIN = Query(None, pattern=r"^[A-Za-z0-9_-]{1,64}$", description="a leaf node's JetStream domain the console "
               "watches (--domain): the consumer is of its stream")


class ConsumerOut(BaseModel):
    system: str
    domain: str | None = Field(description="a leaf node's JetStream domain (null: the system's own stream)")
    stream: str
    consumer: str
    kind: str
    durable: bool
    pending: int
    ack_pending: int
    redelivered: int
    waiting: int
    lag_seconds: float | None
    state: str
    trend: str | None
    catch_up_seconds: float | None
    delivered_seq: int
    ack_floor_seq: int
    paused: bool
    pause_remaining_seconds: float
    max_deliver: int
    pinned_groups: list[str]
    inside_batch: str | None
    read_of_batch: int
    batches_read_whole: int | None = Field(description="of an atomic stream: batches whose every message it "
                                           "acknowledged (null: not counted: another stream, a filter, still reading)")
    batches_ahead: int | None
    batches_counted_whole: bool | None = Field(description="false: the stream is still being read, batches_ahead is "
                                               "at least that")
    redelivering: bool
    why: str


class ConsumersOut(BaseModel):
    read: datetime | None
    consumers: list[ConsumerOut]
    unread: dict[str, str] = Field(description="stream -> why its consumers were not read")


class PauseUntil(BaseModel):
    model_config = ConfigDict(extra="forbid")
    until: Time = Field(description="the pause's end (one past: the server does not pause it, and says so)")


class PauseFor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(gt=0, le=366 * 86400)


class ResetToSeq(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seq: int = Field(ge=1, le=2 ** 53 - 1, description="its next message: this stream sequence (JSON holds it exactly "
                     "up to 2^53)")


class ResetToTime(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time: Time = Field(description="its next message: the first stored at or after this time")


class UnpinIn(BaseModel):
    group: str = Field(min_length=1, max_length=16, pattern=r"^[^\x00-\x1f\x7f]+$")


def consumers(ctx: Context) -> APIRouter:
    api = APIRouter(responses=ERRORS)

    @api.get("/consumers", response_model=ConsumersOut, tags=["consumers"])
    async def consumers_lag(who: Caller = ctx.caller, system: str | None = SYSTEM,
                            stream: str | None = Query(None, max_length=255, pattern=r"^[^\x00-\x20\x7f.*>/\\]+$")
                            ) -> ConsumersOut:
        """Every consumer's pending, ack pending, redeliveries, waiting pulls, lag in seconds (the age of the
        oldest message not yet delivered, by the stream's timestamps) and state (stalled, lagging, paused, ok,
        caught_up), judged against this process's reads before (a trend needs two)."""
        runtime = ctx.runtime_of(system)
        found = await SeenConsumers(runtime.consumers, who.sight).read(stream)
        return ConsumersOut(read=found.at, consumers=[ConsumerOut(**j.as_json()) for j in found.judged],
                            unread=found.unread)

    async def act(system: str | None, who: Caller, stream: str, command: Any) -> Any:
        runtime = ctx.runtime_of(system)
        if command.domain and command.domain not in runtime.settings.collector.domains:
            raise Problem(404, "No such domain", f"domains watched: {', '.join(runtime.settings.collector.domains) or 'none'}")
        return await ctx.acting(who.actions(runtime).run(command), command.name)

    @api.post("/consumers/{stream}/{name}/pause", tags=["consumers"])
    async def pause_consumer(stream: STREAM, name: CONSUMER, body: PauseUntil | PauseFor, who: Caller = ctx.caller,
                             system: str | None = SYSTEM, domain: str | None = DOMAIN) -> dict[str, Any]:
        """The action consumer.pause (ADR-42, nats-server 2.11+): until a time, or for some seconds; the
        server's answer: until when it is paused (null: not paused, a time past)."""
        until = body.until if isinstance(body, PauseUntil) else datetime.now(timezone.utc) + timedelta(seconds=body.seconds)
        paused = await act(system, who, stream, PauseConsumer(ctx.stream_name(stream), name, until, domain=domain or ""))
        return {"paused_until": paused}

    @api.post("/consumers/{stream}/{name}/resume", status_code=204, tags=["consumers"])
    async def resume_consumer(stream: STREAM, name: CONSUMER, who: Caller = ctx.caller,
                              system: str | None = SYSTEM, domain: str | None = DOMAIN) -> None:
        """The action consumer.resume."""
        await act(system, who, stream, ResumeConsumer(ctx.stream_name(stream), name, domain=domain or ""))

    @api.post("/consumers/{stream}/{name}/reset", tags=["consumers"])
    async def reset_consumer(stream: STREAM, name: CONSUMER, body: ResetToSeq | ResetToTime, who: Caller = ctx.caller,
                             system: str | None = SYSTEM, domain: str | None = DOMAIN) -> dict[str, Any]:
        """The action consumer.reset (nats-server 2.14+): its next message a sequence, or the first at a time."""
        done = await act(system, who, stream, ResetConsumer(
            ctx.stream_name(stream), name, body.seq if isinstance(body, ResetToSeq) else None,
            body.time if isinstance(body, ResetToTime) else None, domain=domain or ""))
        return {"next_seq": done.delivered_seq + 1, "pending": done.pending}

    @api.post("/consumers/{stream}/{name}/unpin", status_code=204, tags=["consumers"])
    async def unpin_consumer(stream: STREAM, name: CONSUMER, body: UnpinIn, who: Caller = ctx.caller,
                             system: str | None = SYSTEM, domain: str | None = DOMAIN) -> None:
        """The action consumer.unpin: a priority group's pinned client let go."""
        await act(system, who, stream, UnpinConsumer(ctx.stream_name(stream), name, body.group, domain=domain or ""))

    @api.delete("/consumers/{stream}/{name}", status_code=204, tags=["consumers"])
    async def delete_consumer(stream: STREAM, name: CONSUMER, who: Caller = ctx.caller,
                              system: str | None = SYSTEM, domain: str | None = DOMAIN) -> None:
        """The action consumer.delete (admin)."""
        await act(system, who, stream, DeleteConsumer(ctx.stream_name(stream), name, domain=domain or ""))

    return api
