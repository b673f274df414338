"""The catalogue of batch health checks: each a code, a title, a severity, thresholds with defaults,
a remedy written for ADR-50, and a function from what the console read (Facts) to findings. Pure:
console/checks.py reads the facts (one stream list, /varz, the event log's window) and prints.

A check that needs a fact the console could not read is not run, and says so (Report.unchecked):
never an "ok" it could not know."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Iterator, Mapping

from console.domain.batch_limits import BatchLimits, edit_risks
from console.domain.budgets import BudgetStatus
from console.domain.canary import CanaryResult
from console.domain.consumer_lag import Judged
from console.domain.events import FAST_ENDS, EventKind
from console.domain.durability import ServerSync
from console.domain.node_stops import StopOutside
from console.domain.server_versions import ServerRelease
from console.domain.stream_settings import StreamBatchSettings
from console.domain.wire import MalformedInput, load_object, printable

SEVERITIES = ("ok", "info", "warning", "critical")  # in rising order; Nagios: ok 0, warning 1, critical 2
METADATA_PREFIX = "batch_console.check."  # a stream's own thresholds: batch_console.check.BATCH_012.at_least = 3
_THRESHOLD = re.compile(r"^(BATCH_\d{3})\.([a-z_]{1,40})$")


@dataclass(frozen=True)
class StreamFacts:
    settings: StreamBatchSettings
    duplicate_window: float = 0.0  # seconds
    metadata: Mapping[str, str] = field(default_factory=dict)
    last_seq: int | None = None  # the stream's last sequence (the loss budgets count what it grew by)


@dataclass(frozen=True)
class StreamPage:
    """One page of the server's stream list ($JS.API.STREAM.LIST): the streams it serves, and those it
    holds offline with why (a release that cannot load a stream's config: a downgrade)."""

    streams: tuple[StreamFacts, ...]
    offline: Mapping[str, str]
    total: int

    @classmethod
    def parse(cls, data: bytes, max_bytes: int = 16 * 1024 * 1024) -> StreamPage:
        """Total: MalformedListing for a reply that is not a stream list; a stream it cannot read is left out."""
        obj = load_object(data, MalformedListing, max_bytes)
        if isinstance(obj.get("error"), dict):
            raise MalformedListing(f"the server refused the listing: {str(obj['error'].get('description'))[:200]}")
        total, items, offline = obj.get("total"), obj.get("streams"), obj.get("offline") or {}
        if type(total) is not int or not isinstance(items, list) or not isinstance(offline, dict):
            raise MalformedListing("not a stream list")
        streams = []
        for item in items:
            try:
                config, state = item["config"], item.get("state") or {}
                settings = StreamBatchSettings.from_config(config)
                consumers = state.get("consumer_count")
                window = config.get("duplicate_window")
                metadata = config.get("metadata") or {}
                streams.append(StreamFacts(
                    settings.with_changes(consumers=consumers if type(consumers) is int else None),
                    window / 1e9 if type(window) is int and window > 0 else 0.0,
                    {str(k)[:256]: str(v)[:256] for k, v in metadata.items()} if isinstance(metadata, dict) else {},
                    last if type(last := state.get("last_seq")) is int and 0 <= last < 2 ** 63 else None))
            except (KeyError, TypeError, ValueError, AttributeError):  # one odd stream is left out, not the list
                continue
        return cls(tuple(streams), {str(k)[:256]: str(v)[:500] for k, v in offline.items()}, total)


class MalformedListing(MalformedInput):
    what = "stream list"


@dataclass(frozen=True)
class WindowCounts:
    """What the event log holds of one stream in the checks' window."""

    abandoned: int = 0
    abandoned_timeout: int = 0
    lost_messages: int = 0  # fast-ingest messages lost in gaps
    rejected: int = 0  # 10210/10211 (and 2.12's 10176 on a first message): too many open batches
    leader_change: int = 0  # batches lost because the stream's leader changed
    open_fast: int = 0  # fast batches started and not ended at the window's end


@dataclass(frozen=True)
class Facts:
    """What the checks look at. None: not read (the checks that need it say they could not run)."""

    window_minutes: float = 60.0
    server: ServerRelease | None = None
    limits: BatchLimits | None = None
    limits_assumed: bool = False  # the server's defaults, not its /varz: a figure from them says so
    streams: tuple[StreamFacts, ...] | None = None
    offline: Mapping[str, str] = field(default_factory=dict)  # streams the server could not load, and why
    # The streams of each leaf domain named to the console (--domain): None where they could not be read
    domain_streams: Mapping[str, tuple[StreamFacts, ...] | None] = field(default_factory=dict)
    counts: Mapping[str, WindowCounts] | None = None  # stream -> counts
    collector_age_s: float | None = None  # seconds since the collector's last status (None: no status read)
    collector_healthy: bool | None = None
    collector_unhealthy: tuple[str, ...] = ()
    # the collector's fast paths that are off, each with why (None: no status read; empty: every one on)
    fast_paths_off: tuple[str, ...] | None = None
    advisories_durable: bool | None = None
    system_account: bool | None = None
    event_key_exposed: str | None = None  # how others can read the key file ("" when they cannot)
    nonconforming: Mapping[str, str] | None = None  # client -> the statements it fails (the conformance report)
    unread_why: Mapping[str, str] = field(default_factory=dict)  # a fact not read, and why, where UNREAD is not it
    budgets: tuple[BudgetStatus, ...] | None = None  # each objective's loss budget now (console.domain.budgets)
    canaries: tuple[CanaryResult, ...] | None = None  # the window's canary batches (None: no canary ran)
    stops_outside: tuple[StopOutside, ...] | None = None  # servers stopped outside a maintenance, at a cost (None:
    # the collector has no system account, which alone hears a server stop)
    syncs: tuple[ServerSync, ...] | None = None  # each server's fsync policy (None: no /varz read)
    consumers: tuple[Judged, ...] | None = None  # every consumer as the last read judged it (None: not read)
    # those judged over a whole window of reads (None: none yet, a process that read once: stalls not judged)
    consumers_over_window: tuple[Judged, ...] | None = None


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    title: str
    evidence: str
    remedy: str
    stream: str | None = None
    system: str | None = None  # with a systems file: the NATS system it is about


@dataclass(frozen=True)
class Check:
    code: str
    title: str
    severity: str  # of a finding, unless the check grades it
    remedy: str
    needs: tuple[str, ...]  # the Facts fields it reads
    run: Callable[[Facts, Callable[[str, str | None], float]], Iterator[tuple[str | None, str, str | None]]]
    thresholds: Mapping[str, float] = field(default_factory=dict)  # name -> default
    # The shipped alert rule (when, reason) whose remedy is this check's: one text for the alert, the
    # Incident view and the check, where the check is about the same loss
    same_as_rule: tuple[str, str] | None = None


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    unchecked: tuple[tuple[str, str], ...]  # (code, why it could not run)
    checked: tuple[str, ...]
    unreachable: tuple[tuple[str, str], ...] = ()  # (system, why nothing of it could be checked)

    @property
    def worst(self) -> str:
        found = [f.severity for f in self.findings]
        return max(found, key=SEVERITIES.index) if found else "ok"


def across_systems(reports: Mapping[str, Report | str]) -> Report:
    """Each system's report (or why none could be made) as one: every finding names its system, and an
    unchecked check names the systems where it could not run."""
    findings: list[Finding] = []
    unchecked: dict[str, list[str]] = {}
    checked: dict[str, None] = {}
    unreachable: list[tuple[str, str]] = []
    for system, report in reports.items():
        if isinstance(report, str):
            unreachable.append((system, report))
            continue
        findings += [replace(f, system=system) for f in report.findings]
        for code, why in report.unchecked:
            unchecked.setdefault(code, []).append(f"{system}: {why}")
        checked.update(dict.fromkeys(report.checked))
    return Report(tuple(findings), tuple((code, "; ".join(whys)) for code, whys in unchecked.items()),
                  tuple(checked), tuple(unreachable))


# -- the checks --------------------------------------------------------------------------------
# Each run yields (stream or None, evidence, severity or None for the check's own).
Threshold = Callable[[str, "str | None"], float]  # (name, stream) -> the threshold that applies there
Found = Iterator[tuple["str | None", str, "str | None"]]

def _streams(f: Facts) -> tuple[StreamFacts, ...]:
    return f.streams or ()


def _fast_on_old_server(f: Facts, _t: Threshold) -> Found:
    assert f.server is not None
    for name, reason in f.offline.items():
        if "allow_batched" in reason or "allow_atomic" in reason or "persist_mode" in reason:
            yield name, f"the server holds the stream offline: {reason} (it was made on a newer release)", None
    for s in _streams(f):
        if s.settings.allow_batched and (why := f.server.missing_for("allow_batched")):
            yield s.settings.name, f"allow_batched is on; {why}", None
        elif (level := s.settings.required_api_level) and f.server.api_level is not None and level > f.server.api_level:
            yield s.settings.name, f"the stream needs API level {level}; the server is at {f.server.api_level}", None


def _mirror_with_batches(f: Facts, _t: Threshold) -> Found:
    for s in _streams(f):
        if s.settings.is_mirror and (s.settings.allow_atomic or s.settings.allow_batched):
            yield (s.settings.name, "a mirror with a batch kind switched on (2.12 to 2.15 refuse one at creation, "
                                    "10198/10209: this one was made elsewhere or restored)", None)


def _sourced_with_batches(f: Facts, _t: Threshold) -> Found:
    for s in _streams(f):
        if s.settings.sources and (s.settings.allow_atomic or s.settings.allow_batched):
            kinds = " and ".join(k for k in ("allow_atomic", "allow_batched") if getattr(s.settings, k))
            yield (s.settings.name, f"{kinds} on a stream fed by {s.settings.sources} source(s): sourced messages "
                                    "arrive one by one, outside any batch", None)


def _copies_split_batches(f: Facts, _t: Threshold) -> Found:
    streams = _streams(f)
    for s in streams:
        if not s.settings.allow_atomic:
            continue
        copies = [c.settings for c in streams if s.settings.name in c.settings.copies_of]
        if not copies:
            continue
        read = [c for c in copies if c.consumers]
        named = ", ".join(f"{c.name} ({'mirror' if c.is_mirror else 'source'}"
                          + (f", {c.consumers} consumer(s)" if c.consumers else "") + ")" for c in copies[:10])
        yield (s.settings.name, f"allows atomic batches, and its copies take its messages one by one, without their "
                                f"batch headers (ADR-50: mirrors and sources ignore them): {named}; "
                                + ("a consumer of a copy can read half a batch" if read else
                                   "no consumer reads a copy yet"), "warning" if read else "info")
    yield from _copies_from_domains(f, streams)


def _copies_from_domains(f: Facts, streams: tuple[StreamFacts, ...]) -> Found:
    """BATCH_026 across domains: a stream here that copies a leaf's stream (external: $JS.<domain>.API)."""
    for copy in streams:
        for domain, origin in copy.settings.copies_from:
            if not domain:
                continue  # another account's API prefix: nothing here can read its origin
            what = f"{'mirrors' if copy.settings.is_mirror else 'sources'} {origin} of JetStream domain {domain}"
            if domain not in f.domain_streams:
                yield (copy.settings.name, f"{what}, which the console is not told of: name the domain (--domain "
                                           f"{domain}, or domains in the systems file) to know whether that stream's "
                                           "batches arrive here split", "info")
                continue
            theirs = f.domain_streams[domain]
            if theirs is None:
                yield (copy.settings.name, f"{what}, whose streams could not be read: whether {origin} allows atomic "
                                           "batches is not known", "info")
                continue
            found = next((s for s in theirs if s.settings.name == origin), None)
            if found is not None and found.settings.allow_atomic:
                yield (copy.settings.name, f"{what}, which allows atomic batches: they arrive here one message at a "
                                           "time, without their batch headers; "
                                           + ("a consumer of this copy can read half a batch" if copy.settings.consumers
                                              else "no consumer reads this copy yet"),
                       "warning" if copy.settings.consumers else "info")


def _r1_recovery(f: Facts, _t: Threshold) -> Found:
    for s in _streams(f):
        if s.settings.allow_atomic and s.settings.replicas == 1:
            for risk in edit_risks(s.settings, s.settings, f.limits):
                yield s.settings.name, risk, None


def _duplicate_window(f: Facts, t: Threshold) -> Found:
    timeout = f.limits.timeout if f.limits else 10.0
    for s in _streams(f):
        if (s.settings.allow_atomic or s.settings.allow_batched) and 0 < s.duplicate_window < timeout:
            yield (s.settings.name, f"duplicate window {s.duplicate_window:g} s is shorter than the batch timeout "
                                    f"{timeout:g} s: a batch retried after a timeout with the same Nats-Msg-Id "
                                    "values is stored twice", None)


def _counts(f: Facts) -> Iterable[tuple[str, WindowCounts]]:
    return (f.counts or {}).items()


def _timeouts(f: Facts, t: Threshold) -> Found:
    for stream, c in _counts(f):
        if c.abandoned_timeout >= t("at_least", stream):
            timeout = f"{f.limits.timeout:g} s" if f.limits else "the server's"
            if f.limits and f.limits_assumed:
                timeout += ", assumed: /varz was not read"
            yield (stream, f"{c.abandoned_timeout} atomic batch(es) abandoned for a timeout in {f.window_minutes:g} "
                           f"min: its publishers pause longer than the batch timeout ({timeout})", None)


def _near_inflight(f: Facts, t: Threshold) -> Found:
    cap = f.limits.get("max_batch_inflight_per_stream").fast if f.limits else None
    for stream, c in _counts(f):
        if stream and cap and c.open_fast >= t("ratio", stream) * cap:
            yield stream, f"{c.open_fast} fast batches open of the {cap} a stream may have", None
    total_cap = f.limits.get("max_batch_inflight_total").fast if f.limits else None
    total = sum(c.open_fast for _, c in _counts(f))
    if total_cap and total >= t("ratio", None) * total_cap:
        yield None, f"{total} fast batches open of the {total_cap} the server may have", None


def _rejections(f: Facts, t: Threshold) -> Found:
    for stream, c in _counts(f):
        if c.rejected >= t("at_least", stream):
            yield stream, f"{c.rejected} batch(es) refused for too many open batches (429) in {f.window_minutes:g} min", None


def _graded(f: Facts, t: Threshold, count: Callable[[WindowCounts], int], what: str) -> Found:
    for stream, c in _counts(f):
        n = count(c)
        grade = "critical" if n >= t("critical_at", stream) else "warning" if n >= t("warning_at", stream) else None
        if grade:
            yield stream, f"{n} {what} in {f.window_minutes:g} min", grade


def _abandonment_rate(f: Facts, t: Threshold) -> Found:
    return _graded(f, t, lambda c: c.abandoned, "atomic batches abandoned")


def _gap_rate(f: Facts, t: Threshold) -> Found:
    return _graded(f, t, lambda c: c.lost_messages, "fast-ingest messages lost in gaps")


def _leader_change(f: Facts, t: Threshold) -> Found:
    for stream, c in _counts(f):
        if c.leader_change >= t("at_least", stream):
            yield stream, f"{c.leader_change} batch(es) lost to a leader change in {f.window_minutes:g} min", None


def _known_defect(f: Facts, _t: Threshold) -> Found:
    assert f.server is not None
    for d in f.server.divergences():
        yield None, f"nats-server {f.server.version}: {d.title} ({d.versions()}; scripts/repro/{d.repro})", None


def _capture_not_durable(f: Facts, _t: Threshold) -> Found:
    if f.advisories_durable is False:
        yield None, "the collector follows advisories live only: an abandonment while it is down is lost", None


def _no_system_account(f: Facts, _t: Threshold) -> Found:
    if f.system_account is False:
        yield (None, "no system-account connection: advisories cannot be verified (any client may publish one) and "
                     "no publisher can be named", None)


def _collector(f: Facts, t: Threshold) -> Found:
    if f.collector_age_s is None:
        yield None, "no collector status in the event log: nothing is being collected", "critical"
    elif f.collector_age_s > t("silent_after_s", None):
        yield None, f"the collector's last status is {f.collector_age_s:.0f} s old", "critical"
    elif f.collector_healthy is False:
        yield None, "the collector says it is unhealthy: " + "; ".join(f.collector_unhealthy), "warning"


def _fast_paths_off(f: Facts, _t: Threshold) -> Found:
    if f.fast_paths_off:
        yield (None, "the collector's fast paths are off, so it captures through nats-py's own, slower ones: "
                     + "; ".join(f.fast_paths_off), None)


def _key_exposed(f: Facts, _t: Threshold) -> Found:
    if f.event_key_exposed:
        yield None, f"the event key file is {f.event_key_exposed}: anyone who reads it can forge events", None


def _nonconforming(f: Facts, _t: Threshold) -> Found:
    for client, statements in (f.nonconforming or {}).items():
        yield None, f"{client} fails {statements}", None


def _budgets(f: Facts, t: Threshold) -> Found:
    """An objective's budget spent, nearly spent, or burning on a workbook pair; one finding per measure."""
    for status in f.budgets or ():
        used, counts = status.spent, status.counts
        said = (f"objective {status.objective!r}, lost {status.measure}: {counts.lost:,} of {counts.total:,} over "
                f"{status.window.days}d")
        if used is not None and used >= 1:
            yield None, f"{said}: the budget is spent ({used:.0%})", "critical"
        elif (pair := status.burning) is not None:
            long, short, severity, rate = pair
            yield None, f"{said}: burning at {rate:.1f}x over {long} and {short} ({used or 0:.0%} spent)", severity
        elif used is not None and used >= t("warning_at", None):
            yield None, f"{said}: {used:.0%} of the budget spent", "warning"


def _canaries(f: Facts, t: Threshold) -> Found:
    from console.domain.canary import node_health

    for health in node_health(list(f.canaries or ())):
        if (found := health.finding(t("slow_ms", None))) is not None:
            severity, evidence = found
            yield None, (f"system {health.system}, " if health.system != "default" else "") + evidence, severity


def _not_on_disk(f: Facts, t: Threshold) -> Found:
    lazy = [s for s in f.syncs or () if not s.always]
    for stream in _streams(f):
        st = stream.settings
        kinds = [k for k, on in (("atomic", st.allow_atomic), ("fast-ingest", st.allow_batched)) if on]
        if not kinds or not (lazy or st.persist_mode == "async"):
            continue
        said = [f"{st.name} (R{st.replicas}) allows {' and '.join(kinds)} batches, and a commit is acknowledged "
                f"before it is on disk:"]
        if st.persist_mode == "async":
            said.append("the stream's persist_mode is async (acknowledged before it is even written);")
        if lazy:
            said.append("; ".join(s.said() for s in lazy[:10]) + (f" and {len(lazy) - 10} more" if len(lazy) > 10
                                                                   else "") + ";")
        said.append("a power failure (of every replica's server, for a replicated stream) loses committed batches, "
                    "as Jepsen's analysis of NATS 2.12.1 found")
        yield st.name, " ".join(said), "warning" if st.replicas == 1 or st.persist_mode == "async" else "info"


def _stopped_outside(f: Facts, t: Threshold) -> Found:
    for stop in f.stops_outside or ():
        yield None, stop.evidence(), None


def _consumers_stalled(f: Facts, _t: Threshold) -> Found:
    for j in f.consumers_over_window or ():
        if j.state == "stalled":
            yield j.read.stream, f"consumer {printable(j.read.name, 100)}: {j.why}", None


def _consumers_redelivering(f: Facts, _t: Threshold) -> Found:
    for j in f.consumers_over_window or ():
        if j.redelivering:
            r = j.read
            most = f"at most {r.max_deliver} deliveries each" if r.max_deliver > 0 else "no max_deliver: for ever"
            yield r.stream, (f"consumer {printable(r.name, 100)}: {r.redelivered} message(s) given again over "
                             f"{j.judged_over_s:.0f} s while its ack floor stayed at {r.ack_floor_seq} ({most})"), None


def _consumers_paused(f: Facts, _t: Threshold) -> Found:
    for j in f.consumers or ():
        if j.read.paused:
            yield j.read.stream, (f"consumer {printable(j.read.name, 100)} paused, {j.read.pause_remaining_s:.0f} s to "
                                  f"go, {j.read.pending} message(s) waiting"), None


def _canary_streams_changed(f: Facts, t: Threshold) -> Found:
    from console.domain.canary import node_health

    for health in node_health(list(f.canaries or ())):
        if (evidence := health.tampering()) is not None:
            yield None, (f"system {health.system}, " if health.system != "default" else "") + evidence, None


CHECKS: dict[str, Check] = {c.code: c for c in (
    Check("BATCH_001", "a batch kind the server cannot take", "critical",
          "Upgrade the server to 2.14 or later for fast ingest (API level 4), or switch allow_batched off: every "
          "fast batch on the stream is refused.", ("server", "streams"), _fast_on_old_server),
    Check("BATCH_002", "a batch kind switched on for a mirror", "warning",
          "Switch allow_atomic and allow_batched off on the mirror: it takes its messages from its origin, never "
          "from a batch publisher.", ("streams",), _mirror_with_batches),
    Check("BATCH_003", "a batch kind switched on for a sourced stream", "info",
          "Publish batches to the origin streams, or keep the flag only if publishers also write here directly.",
          ("streams",), _sourced_with_batches),
    Check("BATCH_004", "R1 atomic batches that a restart can leave part-stored", "warning",
          "Use R3, or give the stream a consumer (interest or work-queue retention), a max_age of minutes rather "
          "than seconds, and no per-message TTL, so a batch finished after a restart finds its first messages.",
          ("streams", "limits"), _r1_recovery),
    Check("BATCH_005", "a duplicate window shorter than the batch timeout", "warning",
          "Raise duplicate_window above the batch timeout: a publisher that retries a timed-out batch with the "
          "same message ids must be deduplicated.", ("streams", "limits"), _duplicate_window),
    Check("BATCH_006", "batches abandoned for a timeout", "warning",
          "The publishers pause longer than the batch timeout: send the batch's messages without waiting on "
          "other work, or raise jetstream.limits.batch.timeout.", ("counts",), _timeouts, {"at_least": 1},
          ("lost_batches", "timeout")),
    Check("BATCH_007", "fast batches open near the per-stream or per-server limit", "warning",
          "Spread publishers over streams (or servers) or raise jetstream.limits.batch.max_inflight_per_stream / "
          "max_inflight_total; at the limit new batches are refused (10211).", ("counts", "limits"), _near_inflight, {"ratio": 0.8}),
    Check("BATCH_008", "batches refused for too many open batches (429)", "warning",
          "Publishers must back off and retry on 10210/10211; raise the in-flight limits if the load is expected.",
          ("counts",), _rejections, {"at_least": 1}, ("rejected", "")),
    Check("BATCH_009", "atomic abandonment rate", "warning",
          "Open the stream's Incident view for the reasons: timeouts (slow publishers), gaps (lost messages on the "
          "way), too large (max_msgs) or an API level the server lacks.", ("counts",), _abandonment_rate,
          {"warning_at": 1, "critical_at": 10}),
    Check("BATCH_010", "fast-ingest messages lost in gaps", "warning",
          "Find the publisher on the stream page: a gap is messages the server never got (a slow consumer of its "
          "own flow, a reconnect); use gap mode fail where a batch must be whole.", ("counts",), _gap_rate,
          {"warning_at": 1, "critical_at": 100}, ("lost_messages", "")),
    Check("BATCH_011", "batches lost to a leader change", "warning",
          "Publishers must watch for the gap and the final PubAck (fail mode) or 10176 (atomic) after a leader "
          "change and publish the batch again.", ("counts",), _leader_change, {"at_least": 1},
          ("lost_batches", "leader_change")),
    Check("BATCH_020", "a server release with a known batch defect", "warning",
          "Upgrade the server; until then read the README's table of what this release does differently.",
          ("server",), _known_defect),
    Check("BATCH_021", "advisory capture not durable", "critical",
          "Give the collector the right to create BATCH_CONSOLE_ADVISORIES (or create it) so advisories survive "
          "the collector's restarts.", ("advisories_durable",), _capture_not_durable),
    Check("BATCH_022", "no system-account access", "warning",
          "Give the collector a system-account user (--system-creds): its copies of advisories cannot be forged "
          "and it names each fast batch's publisher.", ("system_account",), _no_system_account),
    Check("BATCH_023", "the collector unhealthy or silent", "critical",
          "Look at the collector's log and Live's status; `batch-console up` restarts a collector that dies.",
          ("collector_healthy",), _collector, {"silent_after_s": 120}),
    Check("BATCH_027", "the collector's fast paths off", "info",
          "Install the nats-py release the console pins (pip install 'batch-console' brings it): the collector reads "
          "and writes the wire itself where nats-py is the release it was tested on, and falls back on nats-py's own "
          "paths (a flood then costs more CPU and lag) where it is not.", ("fast_paths_off",), _fast_paths_off),
    Check("BATCH_024", "the event key readable by others", "critical",
          "chmod 600 the event key file: whoever reads it can write events the console believes.",
          ("event_key_exposed",), _key_exposed),
    Check("BATCH_030", "a publisher that does not conform to ADR-50", "warning",
          "Attach `batch-console conformance` to a bug against the client library; upgrade it when fixed.",
          ("nonconforming",), _nonconforming),
    Check("BATCH_031", "a loss budget spent or burning fast", "warning",
          "Open the Budgets page: the losses that spent the budget are linked to their incidents and publishers; "
          "fix the largest first, or agree a looser objective with the stream's owners.", ("budgets",), _budgets,
          {"warning_at": 0.75}),
    Check("BATCH_032", "a node whose canary batches fail or are slow", "warning",
          "Look at the node first (its log, /varz, /jsz, its disk and routes): a publisher there meets what the canary "
          "met. The Canary page has every node's times.", ("canaries",), _canaries, {"slow_ms": 1000}),
    Check("BATCH_033", "a canary stream changed by someone other than the canary", "warning",
          "A client of the account changed or deleted a BATCH_CONSOLE_CANARY_* stream (the canary put its settings "
          "back where it could): its batches then say nothing of the node. Find who in the server's account, and "
          "deny others $JS.API.STREAM.UPDATE.BATCH_CONSOLE_CANARY_> and $JS.API.STREAM.DELETE.BATCH_CONSOLE_CANARY_>.",
          ("canaries",), _canary_streams_changed),
    Check("BATCH_026", "an atomic stream whose mirror or source copies split its batches", "warning",
          "Read batches from the stream itself, not from its copies: a copy keeps no batch header (nats-server "
          "2.15.1: a mirror's messages carry none, a source's only Nats-Stream-Source), so a consumer of a copy cannot "
          "tell where a batch begins or ends, nor whether the copy has all of one yet.",
          ("streams",), _copies_split_batches),
    Check("BATCH_025", "a batch stream whose commits are acknowledged before they are on disk", "warning",
          "Set `jetstream { sync_interval: always }` on the servers of batch streams (it costs write throughput), "
          "keep persist_mode default for atomic streams, and keep batch streams at R3 or more on servers that do not "
          "lose power together; or accept that a commit is in memory until the next flush.", ("streams", "syncs"),
          _not_on_disk),
    Check("BATCH_040", "a consumer stalled", "warning",
          "Its position did not move over the window while messages waited: start its readers, or find the reader "
          "that holds messages without acking them (its ack_wait redelivers them). The Consumers page has its lag.",
          ("consumers_over_window",), _consumers_stalled),
    Check("BATCH_041", "a consumer redelivering the same messages", "warning",
          "A message its readers cannot handle (a poison message) is given again and again: term it in Replay, or give "
          "the consumer a max_deliver and a dead-letter path (the MAX_DELIVERIES advisory names the message).",
          ("consumers_over_window",), _consumers_redelivering),
    Check("BATCH_042", "a consumer paused", "info",
          "Resume it when its pause was meant to end (batch-console consumers resume STREAM NAME), or leave it: "
          "the server resumes it at its pause's end.", ("consumers",), _consumers_paused),
    Check("BATCH_034", "a server stopped outside a console maintenance while batches were open", "warning",
          "Restart servers with `batch-console maintain restart NODE --run COMMAND` (or `rolling`): each is drained "
          "between batches first and the ledger read after, so an upgrade loses none. The Incident view of each "
          "loss after the stop names its publisher.", ("stops_outside",), _stopped_outside),
)}


# Why a fact was not read, as the report says it
UNREAD = {"nonconforming": "no conformance verdict in the window (the collector grades publishers unless "
                            "--no-conformance)", "counts": "the event log was not read (no event key?)",
          "server": "the server's release was not read", "streams": "the stream list was not read",
          "collector_healthy": "the event log was not read (no event key?)",
          "advisories_durable": "no collector status in the event log",
          "system_account": "no collector status in the event log",
          "fast_paths_off": "no collector status in the event log",
          "syncs": "no server's /varz was read (give the system account or --monitor-url): what a commit is worth "
                   "on disk is not known",
          "stops_outside": "the collector has no system account (or no status in the window): a server's stop "
                           "notice reaches only the system account",
          "budgets": "no loss objectives (--objectives), or no analytics tables yet",
          "canaries": "no canary result in the window (batch-console canary, or up --canary)",
          "consumers": "the consumers were not read"}


class ThresholdError(ValueError):
    pass


def parse_threshold(text: str) -> tuple[str, str, float]:
    """`BATCH_009.warning_at=5` -> (code, name, value); ThresholdError for anything else."""
    key, sep, value = text.partition("=")
    m = _THRESHOLD.match(key.strip())
    if not sep or not m or m[1] not in CHECKS or m[2] not in CHECKS[m[1]].thresholds:
        raise ThresholdError(f"not a threshold of the catalogue: {text[:80]!r} (e.g. BATCH_009.warning_at=5)")
    try:
        number = float(value)
    except ValueError:
        raise ThresholdError(f"{key.strip()}: not a number: {value[:40]!r}") from None
    if not 0 <= number < 1e12:
        raise ThresholdError(f"{key.strip()}: out of range: {value[:40]!r}")
    return m[1], m[2], number


def evaluate(facts: Facts, thresholds: Mapping[tuple[str, str], float] | None = None,
             codes: Iterable[str] | None = None, stream: str | None = None,
             remedies: Mapping[tuple[str, str], str] | None = None) -> Report:
    """Every check of the catalogue (or of `codes`) over the facts; a stream's own thresholds come from
    its metadata (batch_console.check.<code>.<name>), then `thresholds` (flags, settings), then defaults;
    `remedies`: the shipped alert rules' by (when, reason), for the checks about the same loss."""
    given = dict(thresholds or {})
    per_stream = {s.settings.name: s.metadata for s in _streams(facts)}
    findings, unchecked, checked = [], [], []
    for code in codes or CHECKS:
        check = CHECKS[code]
        missing = [need for need in check.needs if getattr(facts, need) is None]
        if missing:
            unchecked.append((code, "; ".join(dict.fromkeys(facts.unread_why.get(need) or UNREAD.get(
                need, f"could not read {need}") for need in missing))))
            continue
        checked.append(code)

        def threshold(name: str, on: str | None, check: Check = check) -> float:
            own = per_stream.get(on or "", {}).get(f"{METADATA_PREFIX}{check.code}.{name}")
            try:
                if own is not None and 0 <= float(own) < 1e12:
                    return float(own)
            except ValueError:
                pass  # a stream's metadata is anyone's text: a bad value is the default's
            return given.get((check.code, name), check.thresholds[name])

        remedy = (remedies or {}).get(check.same_as_rule or ("", "")) or check.remedy
        for where, evidence, severity in check.run(facts, threshold):
            if stream is None or where == stream:
                findings.append(Finding(code, severity or check.severity, check.title, evidence, remedy, where))
    findings.sort(key=lambda f: (-SEVERITIES.index(f.severity), f.code, f.stream or ""))
    return Report(tuple(findings), tuple(unchecked), tuple(checked))


_ENDS = frozenset({*FAST_ENDS, EventKind.FAST_SLOW})
_REJECTED = frozenset({EventKind.FAST_REJECTED, EventKind.ATOMIC_REJECTED})
_LOST = frozenset({EventKind.FAST_LOST, EventKind.ATOMIC_LOST})


def window_counts(events: Iterable[object]) -> dict[str, WindowCounts]:
    """Per stream, what the events of the window (BatchEvent, in log order) count for the load checks."""
    found: dict[str, dict[str, int]] = {}
    open_fast: dict[str, str] = {}  # batch -> stream
    events = list(events)
    # A gap reply names no stream: a batch's stream is the one any of its events names (its PubAck, say)
    stream_of = {b: s for e in events if (b := getattr(e, "batch_id", None)) and (s := getattr(e, "stream", None))}
    for e in events:
        kind, batch = getattr(e, "kind", None), getattr(e, "batch_id", None)  # an EventKind equals its value
        stream = getattr(e, "stream", None) or stream_of.get(batch or "")
        if kind == EventKind.FAST_STARTED and batch:
            open_fast[batch] = stream or ""
        elif kind in _ENDS and batch:
            open_fast.pop(batch, None)
        if not stream:
            continue
        c = found.setdefault(stream, {})
        reason = getattr(e, "reason", None)
        if kind == EventKind.ATOMIC_ABANDONED:
            c["abandoned"] = c.get("abandoned", 0) + 1
            if reason == "timeout":
                c["abandoned_timeout"] = c.get("abandoned_timeout", 0) + 1
        elif kind == EventKind.FAST_GAP:
            c["lost_messages"] = c.get("lost_messages", 0) + (getattr(e, "lost", None) or 0)
        elif kind in _REJECTED:
            c["rejected"] = c.get("rejected", 0) + 1
        if kind in _LOST and reason == "leader_change":
            c["leader_change"] = c.get("leader_change", 0) + 1
    for stream in open_fast.values():  # "": open batches no reply has named a stream for yet
        c = found.setdefault(stream, {})
        c["open_fast"] = c.get("open_fast", 0) + 1
    return {stream: WindowCounts(**c) for stream, c in found.items()}


COUNTED = frozenset({EventKind.ATOMIC_ABANDONED, EventKind.FAST_GAP, *_REJECTED, *_LOST, EventKind.FAST_STARTED,
                     EventKind.FAST_ATTRIBUTED, EventKind.COLLECTOR_STATUS, EventKind.CONFORMANCE, EventKind.CANARY,
                     EventKind.MAINTENANCE, EventKind.NODE_STOPPED, EventKind.LOSS_RETRACTED, *_ENDS})
KEPT_EVENTS = 200_000  # what a long-running evaluator keeps of its window at most


class RecentEvents:
    """The events of the last window that the load checks count, kept as they are followed (the alerts
    part follows the event log anyway): its timer counts them instead of reading the log again."""

    def __init__(self, keep_for_s: float):
        self.keep_for_s = keep_for_s
        self._events: deque[Any] = deque(maxlen=KEPT_EVENTS)

    def add(self, event: Any) -> None:
        if self.keep_for_s > 0 and getattr(event, "kind", None) in COUNTED:
            self._events.append(event)

    def window(self, now: datetime) -> list[Any]:
        start = now - timedelta(seconds=self.keep_for_s)
        while self._events and self._events[0].time < start:
            self._events.popleft()
        return list(self._events)
