"""The conformance report: the clients' latest verdicts from the event log (the collector grades, see
console/collector/grading.py), as text, JSON or Markdown (a report a team attaches to a bug against a
client library). `batch-console conformance`."""

from __future__ import annotations

import asyncio
import json
import logging

from console.config import Settings
from console.domain.conformance import CANNOT_TELL, FAIL, NOT_OBSERVED, PASS, UNCONFIRMED, ClientVerdict
from console.domain.statements import STATEMENTS

log = logging.getLogger(__name__)
NOT_GRADED = ("no conformance verdicts in the event log: is a collector running (without --no-conformance), "
              "and have batches been published?")
MARK = {PASS: "pass", FAIL: "FAIL", UNCONFIRMED: "fail?", NOT_OBSERVED: "-", CANNOT_TELL: "?"}


def _verdict_line(v: ClientVerdict) -> str:
    failing, unconfirmed = v.failing, v.unconfirmed
    state = f"does not conform: fails {', '.join(failing)}" if failing else "no statement failed" if unconfirmed \
        else f"{v.verdict()} (no statement failed)"
    if unconfirmed:
        state += (f"; unconfirmed: {', '.join(unconfirmed)} (only replies on its inbox say so, which any client of "
                  "the account can publish: tap the publish side to confirm)")
    return f"{v.name}: {state}; {v.batches} batch(es) graded, {v.since} .. {v.until}" + \
        ("" if v.publish_side else "; replies only (tap the publish side for every statement)")


def text(verdicts: list[ClientVerdict]) -> str:
    if not verdicts:
        return NOT_GRADED
    lines = []
    for v in verdicts:
        lines.append(_verdict_line(v))
        for sid, s in STATEMENTS.items():
            status = v.status(sid)
            tallies = v.results.get(sid)
            counts = f" ({tallies.passed} passed, {tallies.failed} failed" + \
                (f", {tallies.unconfirmed} unconfirmed)" if tallies.unconfirmed else ")") if tallies else ""
            lines.append(f"  {MARK[status]:<5} {sid} {s.title}{counts}")
            if status in (FAIL, UNCONFIRMED) and tallies:
                lines.append(f"        ADR-50, {s.section}: \"{s.adr}\"")
                lines += [f"        batch {e.batch_id}" + (f" on {e.stream}" if e.stream else "") + f" at {e.time}: "
                          f"{e.detail}" + (f" (rests on {e.rests_on})" if e.rests_on else "") for e in tallies.examples]
    lines.append(f"\n{MARK[PASS]} / {MARK[FAIL]} / {MARK[UNCONFIRMED]} unconfirmed (replies alone) / "
                 f"{MARK[NOT_OBSERVED]} not observed / {MARK[CANNOT_TELL]} cannot tell without the publish side "
                 "(--tap-publish-side)")
    return "\n".join(lines)


def as_json(verdicts: list[ClientVerdict]) -> str:
    return json.dumps({
        "statements": [{"id": s.id, "kind": s.kind, "title": s.title, "section": s.section, "adr": s.adr,
                        "passes": s.passes, "fails": s.fails, "evidence": list(s.evidence)}
                       for s in STATEMENTS.values()],
        "clients": [{"client": v.key, "publisher": v.publisher.to_dict() if v.publisher else None,
                     "conforms": not v.failing, "verdict": v.verdict(), "unconfirmed": v.unconfirmed,
                     "batches": v.batches,
                     "publish_side": v.publish_side,
                     "since": v.since, "until": v.until,
                     "results": {sid: {"status": v.status(sid),
                                       "passed": v.results[sid].passed if sid in v.results else 0,
                                       "failed": v.results[sid].failed if sid in v.results else 0,
                                       "unconfirmed": v.results[sid].unconfirmed if sid in v.results else 0,
                                       "examples": [e.to_dict() for e in v.results[sid].examples]
                                       if sid in v.results else []} for sid in STATEMENTS}}
                    for v in verdicts],
    }, indent=2)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(verdicts: list[ClientVerdict]) -> str:
    if not verdicts:
        return f"_{NOT_GRADED}_"
    out = ["# ADR-50 conformance of batch publishers", "",
           "Graded on the wire by the JetStream Batch Console from the server's replies"
           + (" and the publish side." if any(v.publish_side for v in verdicts) else "."), ""]
    for v in verdicts:
        p = v.publisher
        out += [f"## {_cell(v.name)}", "",
                f"- client library: {_cell(' '.join(x for x in (p.lang, p.version) if x) or 'unknown') if p else 'unknown'}",
                f"- verdict: **{v.verdict()}** ({v.batches} batches, "
                f"{v.since} .. {v.until})", "",
                "| statement | result | passed | failed | what was seen |", "|---|---|---|---|---|"]
        for sid, s in STATEMENTS.items():
            tallies = v.results.get(sid)
            seen = "; ".join(f"`{_cell(e.batch_id)}`: {_cell(e.detail)}" for e in tallies.examples) if tallies else ""
            out.append(f"| {sid} {_cell(s.title)} | {v.status(sid)} | {tallies.passed if tallies else 0} | "
                       f"{tallies.failed if tallies else 0} | {seen} |")
        for sid in v.failing:
            s = STATEMENTS[sid]
            out += ["", f"**{sid}** (ADR-50, {s.section}): > {_cell(s.adr)}", "",
                    f"A pass: {s.passes}. A failure: {s.fails}."]
        out.append("")
    return "\n".join(out)


FORMATS = {"text": text, "json": as_json, "markdown": markdown}


async def run_conformance(settings: Settings, output: str, window_minutes: float) -> int:
    """The command: 0 every client conforms, 1 one does not, 3 no verdict could be read. With a systems
    file, every system's report under its name; 3 also when a system could not be read (unless a
    client fails somewhere: 1)."""
    from console.errors import ConsoleError

    try:
        systems = settings.systems()
        if not systems:
            verdicts = await _verdicts(settings, window_minutes)
    except (ConsoleError, OSError, TimeoutError) as e:
        print(f"batch-console conformance: {str(e)[:300]}")
        return 3
    if not systems:
        print(FORMATS[output](verdicts))
        return 1 if any(v.failing for v in verdicts) else 0 if verdicts else 3

    async def one(of: Settings) -> list[ClientVerdict] | str:
        try:
            return await _verdicts(of, window_minutes)
        except (ConsoleError, OSError, TimeoutError) as e:
            return f"not read: {str(e)[:300]}"

    found = dict(zip((s.name for s in systems), await asyncio.gather(*(one(settings.of_system(s)) for s in systems))))
    print(ACROSS[output](found))
    read = [v for r in found.values() if not isinstance(r, str) for v in r]
    if any(v.failing for v in read):
        return 1
    return 3 if not read or any(isinstance(r, str) for r in found.values()) else 0


async def _verdicts(settings: Settings, window_minutes: float) -> list[ClientVerdict]:
    from console.runtime import Runtime

    async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                  allow_reconnect=False) as runtime:
        return (await runtime.verdicts(window_minutes)).report()


Across = dict[str, "list[ClientVerdict] | str"]  # system -> its verdicts, or why they were not read


def _text_across(found: Across) -> str:
    return "\n\n".join(f"== system {name} ==\n" + (r if isinstance(r, str) else text(r)) for name, r in found.items())


def _json_across(found: Across) -> str:
    return json.dumps({"systems": {name: {"unreachable": r} if isinstance(r, str) else json.loads(as_json(r))
                                   for name, r in found.items()}}, indent=2)


def _markdown_across(found: Across) -> str:
    return "\n\n".join(f"# System {_cell(name)}\n\n" + (f"_{_cell(r)}_" if isinstance(r, str) else markdown(r))
                         for name, r in found.items())


ACROSS = {"text": _text_across, "json": _json_across, "markdown": _markdown_across}
