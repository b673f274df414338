"""The API's reads: systems, losses, streams, checks, incidents, alert rules, the audit trail and its
verification, conformance, History's tables and health. Each answers what its page shows, filtered
to the streams the caller's roles read."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from console.api.callers import Caller
from console.api.context import SYSTEM, Context
from console.api.models import (BATCH, MAX_PAGE, NODE, OBJECTIVE, STREAM, AuditOut, AuditRecordOut, BudgetLossOut, BudgetOut, CanaryOut,
                                ChecksOut, HealthOut, LossesPage, LossOut, RuleOut, SystemOut, Time,
                                VerifyOut)
from console.api.problems import ERRORS, Problem
from console.queries.history import HistoryTable
from console.domain.audit import Outcome
from console.domain.budgets import state_of
from console.domain.checks import Finding
from console.domain.incident import incident_report as markdown_report, no_messages_why, timeline
from console.domain.live_model import LostBatch
from console.domain.stream_settings import StreamBatchSettings
from console.queries import fleet as read_fleet
from console.queries.reads import SystemReads
from console import maintain
from console.runtime import Runtime

SEVERITIES = ("ok", "info", "warning", "critical")
HISTORY_DAYS = 7  # what History shows without dates
CURSOR = r"^\d{1,11}\.\d{6}~[A-Za-z0-9_/-]{0,80}~[^\x00-\x1f\x7f]{1,400}$"  # seconds~system~event id


def reads(ctx: Context) -> APIRouter:
    api, fleet = APIRouter(responses=ERRORS), ctx.fleet

    @api.get("/systems", response_model=list[SystemOut], tags=["systems"])
    async def systems(who: Caller = ctx.caller) -> list[SystemOut]:
        """The NATS systems this console watches, and whether each is reachable."""
        return [SystemOut(name=n, reachable=fleet.runtime(n) is not None, why=fleet.unreached.get(n))
                for n in fleet.names]

    @api.get("/losses", response_model=LossesPage, tags=["losses"])
    async def losses(who: Caller = ctx.caller, system: str | None = SYSTEM,
                     stream: str | None = Query(None, max_length=255), reason: str | None = Query(None, max_length=64),
                     kind: Literal["atomic", "fast"] | None = None, publisher: str | None = Query(None, max_length=256),
                     domain: str | None = Query(None, max_length=256, description="a JetStream domain's losses"),
                     since: Time | None = None, until: Time | None = None,
                     limit: int = Query(100, ge=1, le=MAX_PAGE), offset: int = Query(0, ge=0, le=1_000_000),
                     cursor: str | None = Query(None, max_length=500, pattern=CURSOR,
                                                description="a page's `next` (time~system~id of its last loss): the "
                                                            "losses after it, none skipped or repeated as new ones "
                                                            "arrive")) -> LossesPage:
        """Lost batches as Live holds them (the last hour), newest first; of every system unless one is named."""
        wanted = {system: ctx.runtime_of(system)} if system else fleet.runtimes()
        found = [b for b in read_fleet.losses(wanted) if who.reads(b.stream) and (stream is None or b.stream == stream)
                 and (reason is None or b.reason == reason)
                 and (kind is None or b.kind == kind) and (publisher is None or publisher in (b.publisher or ""))
                 and (domain is None or b.domain == domain)
                 and (since is None or b.time >= since) and (until is None or b.time < until)]
        total = len(found)
        found.sort(key=_order, reverse=True)
        if cursor is not None:
            after = _read_cursor(cursor)
            found = [b for b in found if _order(b) < after]
        page = found[offset:offset + limit]
        items = [LossOut(id=b.event_id, time=b.time, system=b.system or fleet.names[0], stream=b.stream,
                         batch_id=b.batch_id, reason=b.reason, kind="atomic" if b.kind == "atomic" else "fast",
                         publisher=b.publisher, unverified=b.unverified, cluster=b.cluster, domain=b.domain)
                 for b in page]
        more = len(found) > offset + limit
        return LossesPage(items=items, total=total, limit=limit, offset=offset,
                          next=_cursor(page[-1]) if page and more else None)

    @api.get("/streams", response_model=list[StreamBatchSettings], tags=["streams"])
    async def streams(who: Caller = ctx.caller, system: str | None = SYSTEM) -> list[StreamBatchSettings]:
        """Every stream's batch settings the caller's roles read: allow_atomic, allow_batched, persist_mode, replicas."""
        return [s for s in await ctx.runtime_of(system).admin.streams() if who.reads(s.name)]

    @api.get("/streams/{name}", response_model=StreamBatchSettings, tags=["streams"])
    async def stream(name: STREAM, who: Caller = ctx.caller, system: str | None = SYSTEM) -> StreamBatchSettings:
        return await ctx.one_stream(ctx.runtime_of(system), ctx.stream_name(name), who)

    @api.get("/checks", response_model=ChecksOut, tags=["checks"])
    async def checks(who: Caller = ctx.caller, system: str | None = SYSTEM) -> ChecksOut:
        """The health checks as the alerts part last evaluated them: the Checks page's findings."""
        runtime = ctx.runtime_of(system)
        found, when, unchecked = SystemReads(runtime, who.sight).findings()
        findings = [Finding(f["code"], f["severity"], f["title"], f["evidence"], f["remedy"], f["stream"] or None,
                            runtime.system.name) for f in found]
        worst = max((f.severity for f in findings), key=SEVERITIES.index, default="ok")
        return ChecksOut(status=worst, evaluated=when, findings=findings,
                         unchecked=[{"code": c, "why": w} for c, w in unchecked])

    @api.get("/incidents/{batch_id}/report", response_class=PlainTextResponse, tags=["incidents"])
    async def incident_report(batch_id: BATCH, who: Caller = ctx.caller, system: str | None = SYSTEM) -> str:
        """The incident's Markdown report, as the Incident page downloads it."""
        runtime = ctx.runtime_of(system)
        found = await ctx.incident(runtime, batch_id, who)
        return markdown_report(found, messages=ctx.messages(runtime, found, who))

    @api.get("/incidents/{batch_id}", tags=["incidents"])
    async def incident(batch_id: BATCH, who: Caller = ctx.caller, system: str | None = SYSTEM) -> dict[str, Any]:
        """One lost batch's incident: the loss, the batch's own events and what happened around it."""
        runtime = ctx.runtime_of(system)
        found = await ctx.incident(runtime, batch_id, who)
        loss = found.loss
        return {"batch_id": loss.batch_id, "stream": loss.stream, "kind": loss.kind.value, "reason": loss.reason,
                "time": loss.time, "publisher": found.publisher.line() if found.publisher else None,
                "timeline": [{"time": t, "what": what, "detail": detail} for t, what, detail in timeline(found)],
                "folded": dict(found.folded),
                "messages": [{"place": m.place, "batch_seq": m.seq, "subject": m.subject, "headers": dict(m.headers),
                              "text": m.text, "about": m.about, "problem": m.problem}
                             for m in ctx.messages(runtime, found, who)],
                "messages_missing_why": None if found.messages else no_messages_why(found),
                "manifest": {k: v for k, v in found.manifest.as_json().items() if k != "v"} if found.manifest else None}

    @api.get("/budgets", response_model=list[BudgetOut], tags=["budgets"])
    async def budgets(who: Caller = ctx.caller, system: str | None = SYSTEM) -> list[BudgetOut]:
        """Each loss objective's measures now, as the Budgets page shows them (those whose streams the
        caller's roles read)."""
        found = await asyncio.to_thread(SystemReads(ctx.runtime_of(system), who.sight).budgets) or []
        return [BudgetOut(objective=s.objective, measure=s.measure, state=state_of(s),
                          allowed_per_million=s.allowed * 1e6, window_days=s.window.days, lost=s.counts.lost,
                          total=s.counts.total, known=s.counts.known, spent=s.spent, remaining=s.remaining,
                          burn_rates=s.burns, as_of=s.as_of) for s in found]

    @api.get("/budgets/{objective}/losses", response_model=list[BudgetLossOut], tags=["budgets"])
    async def budget_losses(objective: OBJECTIVE, who: Caller = ctx.caller, system: str | None = SYSTEM,
                            limit: int = Query(100, ge=1, le=MAX_PAGE)) -> list[BudgetLossOut]:
        """The losses that spent an objective's budget over its window, newest first."""
        rows = await asyncio.to_thread(SystemReads(ctx.runtime_of(system), who.sight).spenders, objective, limit)
        if rows is None:
            raise Problem(404, "No such objective", f"no objective {objective[:100]!r} the caller may read")
        return [BudgetLossOut(**{k: r[k] for k in ("time", "stream", "batch_id", "what", "publisher")}) for r in rows]

    @api.get("/canary", response_model=list[CanaryOut], tags=["canary"])
    async def canary(who: Caller = ctx.caller, system: str | None = SYSTEM,
                     minutes: float = Query(60.0, gt=0, le=24 * 60)) -> list[CanaryOut]:
        """The canary batches of the last `minutes`, newest first: each node's times and losses."""
        from console.services.canaries import recent_canaries

        runtime = ctx.runtime_of(system)
        found = await recent_canaries(lambda: runtime.nc, lambda: runtime.event_log, minutes)
        return [CanaryOut(time=when, system=r.system, node=r.node, kind=r.kind, first_ack_ms=r.first_ack_ms,
                          commit_ms=r.commit_ms, lost=r.lost, sent=r.sent, error=r.error, led_elsewhere=r.led_elsewhere)
                for when, r in reversed(found)]

    @api.get("/alerts/rules", response_model=list[RuleOut], tags=["alerts"])
    async def rules(who: Caller = ctx.caller, system: str | None = SYSTEM) -> list[RuleOut]:
        found, _ = ctx.runtime_of(system).alerts.rules()
        return [RuleOut(name=r.name, when=r.when, severity=r.severity, muted=r.muted, streams=list(r.streams),
                        systems=list(r.systems)) for r in found]

    @api.get("/audit", response_model=AuditOut, tags=["audit"])
    async def audit(who: Caller = ctx.caller, system: str | None = SYSTEM, since: Time | None = None,
                    limit: int = Query(500, ge=1, le=MAX_PAGE)) -> AuditOut:
        """The audit trail, newest first, and whether the chain of the records read holds."""
        checked = await SystemReads(ctx.runtime_of(system), who.sight).audit(since)
        records = [AuditRecordOut(seq=seq, time=r.time, user=r.actor.user, address=r.actor.address, action=r.action,
                                  target=r.target, outcome=r.outcome, detail=r.detail)
                   for seq, r in reversed(checked.records[-limit:])]
        return AuditOut(intact=checked.intact, breaks=[f"{seq}: {why}" for seq, why in checked.breaks], records=records)

    @api.get("/audit/verify", response_model=VerifyOut, tags=["audit"])
    async def verify(who: Caller = ctx.caller, system: str | None = SYSTEM) -> VerifyOut:
        """The whole trail's chain checked from its first record, as `batch-console audit --verify`."""
        checked = await ctx.runtime_of(system).audit.read(None)
        times = [r.time for _, r in checked.records]
        return VerifyOut(intact=checked.intact, records=len(checked.records), written=checked.written,
                         unsafe=checked.unsafe, first=min(times, default=None),
                         last=max(times, default=None), breaks=[f"{seq}: {why}" for seq, why in checked.breaks],
                         aged_out=checked.aged_out)

    @api.get("/conformance", tags=["conformance"])
    async def conformance(who: Caller = ctx.caller, system: str | None = SYSTEM) -> list[dict[str, Any]]:
        """Each batch publisher's verdict on ADR-50's statements, as `batch-console conformance --format json`."""
        verdicts = await SystemReads(ctx.runtime_of(system), who.sight).verdicts()
        return [{"client": v.name, "key": v.key, "conforms": not v.failing, "verdict": v.verdict(),
                 "failing": list(v.failing),
                 "batches": v.batches, "since": v.since, "until": v.until} for v in verdicts.report()]

    @api.get("/history/abandoned_batches", tags=["history"])
    async def history_losses(who: Caller = ctx.caller, system: str | None = SYSTEM, since: Time | None = None,
                             until: Time | None = None,
                             domain: str | None = Query(None, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                                                        description="only a JetStream domain's losses (a leaf's)")
                             ) -> list[dict[str, Any]]:
        """History's ledger of lost batches (the last week by default), each with its domain where its advisory
        named one."""
        return history_rows(ctx.runtime_of(system), "abandoned_batches", who, since, until,
                            {} if domain is None else {"domain": domain})

    @api.get("/history/{table}", tags=["history"])
    async def history(table: HistoryTable, who: Caller = ctx.caller, system: str | None = SYSTEM,
                      since: Time | None = None, until: Time | None = None) -> list[dict[str, Any]]:
        """One of History's tables, as the History page shows and downloads it (the last week by default)."""
        return history_rows(ctx.runtime_of(system), table, who, since, until)

    @api.get("/maintenance/{node}/plan", tags=["maintenance"])
    async def maintenance_plan(node: NODE, who: Caller = ctx.caller, system: str | None = SYSTEM,
                               watch: float | None = Query(None, ge=0, le=60, description="seconds the streams the "
                                                           "node leads are watched for open batches (default: one "
                                                           "batch timeout)"),
                               evacuate: bool = Query(False, description="what evacuating its replicas would move "
                                                      "too (nats-server 2.15)")) -> dict[str, Any]:
        """What taking a server out for maintenance would do, changing nothing, as `batch-console maintain plan`:
        its verdict (safe, wait, refused) and why, the streams and consumers it leads, the batches open on them.
        A plan names every stream the node leads: it is read by a role that may drain nodes (maintain.drain)
        and sees every stream; any other is refused, audited."""
        runtime = ctx.runtime_of(system)
        why = who.grants().why_not("maintain.drain") or (
            "a node's plan names every stream it leads: its role sees some streams only" if who.sight.limit else None)
        if why is not None:
            await who.actions(runtime).note("maintain.plan", node, Outcome.ROLE, f"{why} (user {who.actor.user})")
            raise Problem(403, "Forbidden", f"the role {who.role} may not read a node's plan: {why}"[:300])
        return (await maintain.maintenance_plan(runtime, node, watch, evacuate)).to_dict()

    @api.get("/health", response_model=list[HealthOut], tags=["health"])
    async def health(who: Caller = ctx.caller) -> list[HealthOut]:
        """Each system's connection, its collector and the event key, as the header's badges say."""
        now = datetime.now(timezone.utc)
        found = []
        for name, runtime in fleet.runtimes().items():
            state = runtime.live
            fresh = state.model.freshness(now)
            found.append(HealthOut(system=name, connection=state.connection, collector=state.model.collector_state(now),
                                   event_key_problem=state.key_problem,
                                   last_event_seconds_ago=fresh.total_seconds() if fresh is not None else None,
                                   events_skipped=state.skipped))
        return found

    return api


def history_rows(runtime: Runtime, table: str, who: Caller, since: datetime | None,
                 until: datetime | None, only: dict[str, str] | None = None) -> list[dict[str, Any]]:
    reader = SystemReads(runtime, who.sight).history()
    if reader is None:
        raise Problem(404, "No history yet", "the analytics job has not written this system's tables")
    end = until or datetime.now(timezone.utc)
    start = since or end - timedelta(days=HISTORY_DAYS)
    frame = getattr(reader, table)(start, end, **(only or {}))
    rows: list[dict[str, Any]] = json.loads(frame.to_json(orient="records", date_format="iso"))
    return rows


def _order(b: LostBatch) -> tuple[float, str, str]:
    """Newest first, and a total order among losses of the same instant."""
    return b.time.timestamp(), b.system, b.event_id


def _cursor(b: LostBatch) -> str:
    """A loss's place in the order, readable: every string the pattern takes is a place."""
    return f"{b.time.timestamp():.6f}~{b.system}~{b.event_id}"


def _read_cursor(text: str) -> tuple[float, str, str]:
    if not re.match(CURSOR, text):  # the query's own pattern: here for a call from elsewhere than the route
        raise Problem(422, "Not a cursor", "give the `next` of a page of /losses")
    seconds, system, event_id = text.split("~", 2)
    return float(seconds), system, event_id
