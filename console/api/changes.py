"""The API's actions, each through the same actions as a page (one role check, one write-ahead audit
record naming the caller): a stream's batch settings, muting a rule, a search as a job, and exports of
History's tables, the audit trail and a search's matches (the action export.csv, as a download is)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from console.api.callers import Caller
from console.api.context import SYSTEM, Context
from console.api.jobs import Jobs, SearchIn, SearchOut
from console.api.models import JOB, RULE, STREAM, BatchSettingsPatch, ExportFormatName, RuleIn, RuleOut, Time
from console.api.problems import ERRORS, Problem
from console.queries.history import HistoryTable
from console.api.reads import HISTORY_DAYS, history_rows
from console.commands import EditStream, ExportSearch, ExportTable, MuteAlertRule, UnmuteAlertRule
from console.domain.alert_rules import RulesError, parse_rules
from console.domain.display import Clock
from console.domain.search import SearchQuery
from console.domain.stream_settings import StreamBatchSettings
from console.export import format_named
from console.queries.audit import audit_frame
from console.queries.reads import SystemReads
from console.runtime import Runtime

FORMAT = Query("csv", description="csv, jsonl or parquet: as the pages' downloads")


def changes(ctx: Context) -> APIRouter:
    api = APIRouter(responses=ERRORS)
    jobs = Jobs()

    @api.patch("/streams/{name}", response_model=StreamBatchSettings, tags=["streams"])
    async def edit_stream(name: STREAM, change: BatchSettingsPatch, who: Caller = ctx.caller,
                          system: str | None = SYSTEM) -> StreamBatchSettings:
        """The action stream.edit: as the Streams page's Apply, audited with the caller's name."""
        runtime = ctx.runtime_of(system)
        current = await ctx.one_stream(runtime, ctx.stream_name(name), who)
        edit = EditStream.validate(current, **change.model_dump(exclude_none=True))
        if edit is None:
            return current
        return await ctx.acting(who.actions(runtime).run(edit), "stream.edit")

    def known_rule(runtime: Runtime, name: str) -> str:
        if name not in {r.name for r in runtime.alerts.rules()[0]}:
            raise Problem(404, "No such rule", name[:200])
        return name

    @api.put("/alerts/rules/{name}", response_model=RuleOut, tags=["alerts"])
    async def save_rule(name: RULE, rule: RuleIn, who: Caller = ctx.caller, system: str | None = SYSTEM) -> RuleOut:
        """Add the rule, or replace the one of this name (the action alert_rule.save, as the Alerts page's
        Save): a rule that does not read is refused with its line."""
        runtime = ctx.runtime_of(system)
        try:
            found = parse_rules(rule.toml, runtime.alerts.targets)
        except RulesError as e:
            raise Problem(422, "Not a rule", str(e)[:300]) from None
        if [r.name for r in found] != [name]:
            raise Problem(422, "Not this rule", f"give one [[rule]] table whose name is {name!r}")
        await ctx.acting(runtime.alerts.save_rule(rule.toml, who.actions(runtime)), "alert_rule.save")
        saved = next(r for r in runtime.alerts.rules()[0] if r.name == name)
        return RuleOut(name=saved.name, when=saved.when, severity=saved.severity, muted=saved.muted,
                       streams=list(saved.streams), systems=list(saved.systems))

    @api.post("/alerts/rules/{name}/mute", status_code=204, tags=["alerts"])
    async def mute_rule(name: RULE, who: Caller = ctx.caller, system: str | None = SYSTEM) -> None:
        """Mute an alert rule (the action alert_rule.mute, audited)."""
        runtime = ctx.runtime_of(system)
        await ctx.acting(who.actions(runtime).run(MuteAlertRule(known_rule(runtime, name))), "alert_rule.mute")

    @api.post("/alerts/rules/{name}/unmute", status_code=204, tags=["alerts"])
    async def unmute_rule(name: RULE, who: Caller = ctx.caller, system: str | None = SYSTEM) -> None:
        """Unmute an alert rule (the action alert_rule.unmute, audited)."""
        runtime = ctx.runtime_of(system)
        await ctx.acting(who.actions(runtime).run(UnmuteAlertRule(known_rule(runtime, name))), "alert_rule.unmute")

    @api.post("/searches", response_model=SearchOut, status_code=202, tags=["search"])
    async def start_search(search: SearchIn, who: Caller = ctx.caller, system: str | None = SYSTEM) -> SearchOut:
        """A search of a stream as a job (the action search.run, its limits and masking): read it with GET."""
        runtime = ctx.runtime_of(system)
        ctx.readable(who, search.stream)
        try:
            query = SearchQuery(**search.model_dump())
        except ValueError as e:  # SearchRefused: the expression, a filter, a name past 255 bytes: the job says
            job_id = jobs.refused(who.owns, f"search refused: {e}")
        else:
            job_id = jobs.start(who.owns, query, who.actions(runtime))
        found = jobs.of(who.owns, job_id)
        assert found is not None
        return found.out(job_id)

    @api.get("/searches/{job_id}", response_model=SearchOut, tags=["search"])
    async def read_search(job_id: JOB, who: Caller = ctx.caller) -> SearchOut:
        out: SearchOut = own_job(job_id, who).out(job_id)
        return out

    @api.delete("/searches/{job_id}", status_code=204, tags=["search"])
    async def cancel_search(job_id: JOB, who: Caller = ctx.caller) -> None:
        own_job(job_id, who).cancel = True

    def own_job(job_id: str, who: Caller) -> Any:
        found = jobs.of(who.owns, job_id)
        if found is None:
            raise Problem(404, "No such search", "none of this caller's searches has this id")
        return found

    def download(data: bytes, fmt: str, name: str) -> Response:
        kind = format_named(fmt)
        return Response(data, media_type=kind.media_type,
                        headers={"Content-Disposition": f'attachment; filename="{name}.{kind.name}"'})

    @api.get("/searches/{job_id}/export", response_class=Response, tags=["exports"])
    async def export_search(job_id: JOB, who: Caller = ctx.caller, system: str | None = SYSTEM,
                            format: ExportFormatName = FORMAT) -> Response:
        """A search's matches so far, masked as shown, in a download's format (the action export.search)."""
        job = own_job(job_id, who)
        if job.query is None:
            raise Problem(409, "Nothing to export", job.refused)
        command = ExportSearch(job.query, format, matches=list(job.matches))
        data = await ctx.acting(who.actions(ctx.runtime_of(system)).run(command), "export")
        return download(data, format, f"search-{job.query.stream}")

    @api.get("/exports/history/{table}", response_class=Response, tags=["exports"])
    async def export_history(table: HistoryTable, who: Caller = ctx.caller, system: str | None = SYSTEM,
                             since: Time | None = None, until: Time | None = None,
                             format: ExportFormatName = FORMAT) -> Response:
        """One of History's tables for the dates (the last week by default), as History downloads it."""
        runtime = ctx.runtime_of(system)
        rows = history_rows(runtime, table, who, since, until)
        columns = list(rows[0]) if rows else []
        first, last = _dates(since, until, HISTORY_DAYS)
        command = ExportTable(table, f"{first}..{last}", format, rows, columns, {"table": table, "from": first, "to": last})
        return download(await ctx.acting(who.actions(runtime).run(command), "export"), format, table)

    @api.get("/exports/audit", response_class=Response, tags=["exports"])
    async def export_audit(who: Caller = ctx.caller, system: str | None = SYSTEM, since: Time | None = None,
                           format: ExportFormatName = FORMAT) -> Response:
        """The audit trail from `since` (its beginning by default), as the Audit page downloads it."""
        runtime = ctx.runtime_of(system)
        frame = audit_frame(await SystemReads(runtime, who.sight).audit(since), Clock())
        first, last = _dates(since, None, None)
        command = ExportTable("audit", f"{first}..{last}", format, frame.to_dict("records"), list(frame.columns),
                              {"table": "audit", "from": first, "to": last})
        return download(await ctx.acting(who.actions(runtime).run(command), "export"), format, "audit")

    return api


def _dates(since: datetime | None, until: datetime | None, days: int | None) -> tuple[str, str]:
    """The period an export names: `days` before its end by default, or else from the beginning."""
    end = until or datetime.now(timezone.utc)
    start = since or (end - timedelta(days=days) if days else None)
    return (f"{start:%Y-%m-%d}" if start else "beginning"), f"{end:%Y-%m-%d}"
