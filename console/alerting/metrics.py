"""Prometheus metrics of the event log, in the Prometheus text format, with bounded labels: past
MAX_STREAMS streams, and past MAX_NEW_REASONS reasons a newer server gave, the rest are folded into
"other".

Rendered here rather than by prometheus_client: its exposition formats every sample anew (about
8 µs each; 108 ms for 1,000 streams' 14,000 samples), while a scrape must stay under 50 ms. Each
series keeps its rendered name and labels, so a scrape only writes the values."""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from console.domain.budgets import BudgetStatus
from console.domain.canary import canary_result
from console.domain.consumer_lag import STATES, Judged
from console.domain.wire import MalformedInput
from console.domain.events import FAST_ENDS, LOST_KINDS, UNKNOWN_STREAM, BatchEvent, EventKind
from console.domain.live_model import lost_batch
from console.domain.reasons import OTHER, is_known

MAX_STREAMS = 1000
MAX_CONSUMER_SERIES = 500  # consumers named in /metrics (the rest: "(other)" of their stream)
MAX_NEW_REASONS = 20
MAX_UNATTRIBUTED = 10_000  # batches whose gaps wait for their stream; past it the oldest count as unknown
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Family:
    """One metric: its samples by label values, each with its rendered `name{labels}` kept."""

    def __init__(self, name: str, help: str, kind: str, labels: tuple[str, ...] = (),
                 fixed: tuple[tuple[str, str], ...] = ()):
        """fixed: labels every sample carries, first (of several NATS systems: its system)."""
        self.name, self.help, self.kind, self.labels, self.fixed = name, help, kind, labels, fixed
        self.samples: dict[tuple[str, ...], float] = {}
        self._series: dict[tuple[str, ...], str] = {}
        self._lock = threading.Lock()

    def _key(self, values: tuple[str, ...]) -> tuple[str, ...]:
        if values not in self._series:
            sample = self.name + ("_total" if self.kind == "counter" else "")
            pairs = ",".join(f'{label}="{_escape(value)}"' for label, value in (*self.fixed, *zip(self.labels, values)))
            self._series[values] = f"{sample}{{{pairs}}}" if pairs else sample
        return values

    def inc(self, *values: str, amount: float = 1.0) -> None:
        with self._lock:
            key = self._key(values)
            self.samples[key] = self.samples.get(key, 0.0) + amount

    def set(self, *values: str, value: float) -> None:
        with self._lock:
            self.samples[self._key(values)] = value

    def clear(self) -> None:
        with self._lock:
            self.samples.clear()
            if len(self._series) > 10 * MAX_CONSUMER_SERIES:  # names that came and went (consumers): let go
                self._series.clear()

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}", *self.render_samples()]

    def render_samples(self) -> list[str]:
        with self._lock:
            return [f"{self._series[key]} {value!r}" for key, value in self.samples.items()]


class Metrics:
    def __init__(self, system: str = ""):
        """system: of several NATS systems, the one these metrics are of (a `system` label on every sample; the
        systems file holds at most 32, so the label is bounded)."""
        fixed = (("system", system),) if system else ()

        def family(name: str, help: str, kind: str, labels: tuple[str, ...] = ()) -> Family:
            return Family(name, help, kind, labels, fixed)

        self.lost_batches = family("batch_console_lost_batches", "Batches lost", "counter", ("stream", "kind", "reason"))
        self.lost_messages = family("batch_console_fast_lost_messages", "Fast-ingest messages lost in gaps", "counter",
                                    ("stream",))
        self.gaps = family("batch_console_fast_gaps", "Fast-ingest gaps", "counter", ("stream", "gap_mode"))
        self.fast_batches = family("batch_console_fast_batches", "Fast batches by outcome", "counter",
                                   ("stream", "outcome"))
        self.rejected = family("batch_console_rejected", "Batches refused for too many in flight", "counter",
                               ("stream", "err_code"))
        self.collector_up = family("batch_console_collector_up", "1 while the collector reports", "gauge")
        self.lag = family("batch_console_event_log_lag_seconds", "Age of the newest event read", "gauge")
        self.firing = family("batch_console_alerts_firing", "Alerts firing", "gauge", ("rule", "severity"))
        self.check_status = family("batch_console_check_status", "A batch health check's state: 0 ok, 1 info, "
                                   "2 warning, 3 critical (batch-console check)", "gauge", ("code", "stream"))
        self.budget_remaining = family("batch_console_budget_remaining", "A loss objective's budget left over its "
                                       "window (1: all of it, below 0: overspent)", "gauge", ("objective", "measure"))
        self.budget_burn = family("batch_console_budget_burn_rate", "A loss objective's burn rate over a window (1: "
                                  "spends the budget exactly)", "gauge", ("objective", "measure", "window"))
        self.canary_ms = family("batch_console_canary_milliseconds", "The last canary batch's time to its first ack "
                                "and to its commit, per node", "gauge", ("node", "kind", "until"))
        self.canary_failed = family("batch_console_canary_failed", "Canary batches that did not commit or lost "
                                    "messages", "counter", ("node", "kind"))
        labels = ("stream", "consumer")
        self.consumer_pending = family("batch_console_consumer_pending", "Messages a consumer has not been given",
                                       "gauge", labels)
        self.consumer_ack_pending = family("batch_console_consumer_ack_pending", "Messages a consumer was given and "
                                           "not acknowledged", "gauge", labels)
        self.consumer_redelivered = family("batch_console_consumer_redelivered", "Messages given more than once and "
                                           "not yet acknowledged", "gauge", labels)
        self.consumer_lag = family("batch_console_consumer_lag_seconds", "Age of the oldest message a consumer has "
                                   "not been given, by the stream's timestamps", "gauge", labels)
        self.consumer_state = family("batch_console_consumers", "Consumers by state (stalled, lagging, paused, ok, "
                                     "caught_up)", "gauge", ("state",))
        self.families = (self.lost_batches, self.lost_messages, self.gaps, self.fast_batches, self.rejected,
                         self.collector_up, self.lag, self.firing, self.check_status, self.budget_remaining,
                         self.budget_burn, self.canary_ms, self.canary_failed, self.consumer_pending,
                         self.consumer_ack_pending, self.consumer_redelivered, self.consumer_lag, self.consumer_state)
        self._nodes: set[str] = set()
        self._streams: set[str] = set()
        self._new_reasons: set[str] = set()
        # A fast batch's gaps while no reply has named its stream: counted under the stream its PubAck
        # (fast_attributed) names, or under "(unknown)" when it ends without one.
        self._unattributed: dict[str, list[BatchEvent]] = {}

    def budgets(self, statuses: list[BudgetStatus]) -> None:
        """Each objective's budget left and burn rates (one not known is no sample: never a false zero).
        Objectives are the operator's own file's, bounded there: no label from the wire."""
        self.budget_remaining.clear()
        self.budget_burn.clear()
        for status in statuses:
            if (left := status.remaining) is not None:
                self.budget_remaining.set(status.objective, status.measure, value=left)
            for window, rate in status.burns.items():
                if rate is not None:
                    self.budget_burn.set(status.objective, status.measure, window, value=rate)

    def consumers(self, judged: list[Judged]) -> None:
        """Every consumer's figures, the MAX_CONSUMER_SERIES most behind by name and the rest as one consumer
        "(other)" of their stream (summed; its lag the oldest): labels from the wire stay bounded."""
        families = (self.consumer_pending, self.consumer_ack_pending, self.consumer_redelivered, self.consumer_lag)
        for family in (*families, self.consumer_state):
            family.clear()
        for state in STATES:
            self.consumer_state.set(state, value=sum(j.state == state for j in judged))
        ranked = sorted(judged, key=lambda j: (STATES.index(j.state), -(j.lag_seconds or 0), -j.read.pending))
        for i, j in enumerate(ranked):
            r = j.read
            stream = self.stream(f"{j.domain}:{r.stream}" if j.domain else r.stream)  # a leaf's, with its domain
            consumer = r.name if i < MAX_CONSUMER_SERIES and stream != OTHER else OTHER
            key = (stream, consumer)
            add = consumer == OTHER
            for family, value in zip(families[:3], (r.pending, r.ack_pending, r.redelivered)):
                family.set(*key, value=value + (family.samples.get(key, 0.0) if add else 0.0))
            if j.lag_seconds is not None:
                self.consumer_lag.set(*key, value=max(j.lag_seconds, self.consumer_lag.samples.get(key, 0.0) if add else 0.0))

    def stream(self, name: str | None) -> str:
        name = name or UNKNOWN_STREAM
        if name in self._streams:
            return name
        if len(self._streams) >= MAX_STREAMS:
            return OTHER
        self._streams.add(name)
        return name

    def _count_gaps(self, gaps: list[BatchEvent], stream: str | None) -> None:
        label = self.stream(stream) if gaps else ""
        for gap in gaps:
            self.gaps.inc(label, gap.gap_mode or "")
            self.lost_messages.inc(label, amount=gap.lost or 0)

    def reason(self, reason: str) -> str:
        """A reason label: every known one, and the first MAX_NEW_REASONS a newer server gave; past that, other."""
        if is_known(reason) or reason in self._new_reasons:
            return reason
        if len(self._new_reasons) >= MAX_NEW_REASONS:
            return OTHER
        self._new_reasons.add(reason)
        return reason

    def _canary(self, event: BatchEvent) -> None:
        try:
            result = canary_result(event)
        except MalformedInput:  # anyone may write to the event log: an odd one is no sample
            return
        if result.node not in self._nodes and len(self._nodes) >= MAX_STREAMS:
            node = OTHER
        else:
            self._nodes.add(result.node)
            node = result.node
        for until, ms in (("first_ack", result.first_ack_ms), ("commit", result.commit_ms)):
            if ms is not None:
                self.canary_ms.set(node, result.kind, until, value=ms)
        if result.failed:
            self.canary_failed.inc(node, result.kind)

    def observe(self, event: BatchEvent) -> None:
        kind = event.kind
        if kind is EventKind.CANARY:
            self._canary(event)
            return
        if kind in LOST_KINDS:
            lost = lost_batch(event)
            self.lost_batches.inc(self.stream(event.stream), lost.kind, self.reason(lost.reason))
        if kind is EventKind.FAST_GAP:
            if event.stream is None and event.batch_id:  # counted once its stream is known, or at its end
                self._unattributed.setdefault(event.batch_id, []).append(event)
                while len(self._unattributed) > MAX_UNATTRIBUTED:
                    self._count_gaps(self._unattributed.pop(next(iter(self._unattributed))), None)
            else:
                self._count_gaps([event], event.stream)
        if kind is EventKind.FAST_ATTRIBUTED or kind in FAST_ENDS:
            self._count_gaps(self._unattributed.pop(event.batch_id or "", []), event.stream)
        outcome = {EventKind.FAST_COMMITTED: "committed", EventKind.FAST_ENDED_EARLY: "ended_early",
                   EventKind.FAST_DROPPED: "dropped", EventKind.FAST_LOST: "lost"}.get(kind)
        if outcome:
            self.fast_batches.inc(self.stream(event.stream), outcome)
        if kind in (EventKind.FAST_REJECTED, EventKind.ATOMIC_REJECTED):
            self.rejected.inc(self.stream(event.stream), str(event.err_code))

    def render(self) -> bytes:
        return render(self)


def render(*systems: Metrics) -> bytes:
    """One exposition of one system's metrics or several's: each metric's HELP and TYPE once, then every
    system's samples of it."""
    lines = []
    for families in zip(*(m.families for m in systems)):
        lines += families[0].render()
        for family in families[1:]:
            lines += family.render_samples()
    return ("\n".join(lines) + "\n").encode()


def _listener(inherited: str | None, address: str, port: int) -> socket.socket | None:
    if inherited is None or not (inherited.isascii() and inherited.isdigit()) or len(inherited) > 6:
        return None
    try:
        sock = socket.socket(fileno=int(inherited))
    except OSError:  # not an open socket
        return None
    try:
        if sock.type == socket.SOCK_STREAM and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) \
                and sock.getsockname()[:2] == (address, port):
            return sock
    except OSError:
        pass
    sock.detach()  # not ours to close
    return None


def serve_metrics(metrics: Metrics | Callable[[], list[Metrics]], port: int,
                  address: str = "127.0.0.1", inherited: str | None = None) -> ThreadingHTTPServer:
    """GET /metrics on address:port (0: a free port), in a thread of its own; .shutdown() stops it. Of
    several systems, `metrics` gives each system's (those open now). `inherited`: the number of a socket
    the supervisor listens on for us (`up` holds the port it printed across our restarts), used when it
    is a listening TCP socket on that address and port; anything else is ignored and the port bound."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render() if isinstance(metrics, Metrics) else render(*metrics())
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    listener = _listener(inherited, address, port)
    if listener is None:
        server = ThreadingHTTPServer((address, port), Handler)
    else:
        server = ThreadingHTTPServer(listener.getsockname(), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = listener
        server.server_address = listener.getsockname()
        server.server_name, server.server_port = address, server.server_address[1]
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
