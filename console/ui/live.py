"""The Live page: lost batches as they happen, and the console's own health."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import panel as pn
import param

from console.domain.live_model import LiveModel

REASONS = ("timeout", "incomplete", "large", "unsupported", "gap", "error", "dropped")
COLUMNS = {"time": "datetime64[ns, UTC]", "stream": "object", "batch_id": "object", "reason": "object", "kind": "object"}


def recent_frame(model: LiveModel, limit: int = 100) -> pd.DataFrame:
    """Newest first; explicit dtypes so an empty frame streams like a full one."""
    rows = [{"time": b.time, "stream": b.stream or "(unknown)", "batch_id": b.batch_id or "", "reason": b.reason,
             "kind": b.kind} for b in model.newest_first(limit)]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(COLUMNS)


def status_text(model: LiveModel, connection: str, problem: str | None, now: datetime) -> str:
    fresh = model.freshness(now)
    rejected = sum((model.collector.get("rejected") or {}).values())
    parts = [
        f"NATS {connection}",
        "collector alive" if model.collector_alive(now) else "collector SILENT",
        "no events yet" if fresh is None else f"last event {fresh.total_seconds():.0f}s ago",
        f"inputs rejected {rejected}",
    ]
    if problem:
        parts.append(problem)
    return " · ".join(parts)


class LivePage(pn.viewable.Viewer):
    """Counters by reason (5 min / 1 h), recent lost batches newest first, a status bar."""

    model = param.ClassSelector(class_=LiveModel, doc="The process's live model, shared by sessions")
    connection = param.Callable(doc="Returns the NATS connection state as text")
    problem = param.Callable(default=lambda: None, doc="Returns the live state's problem, if any")
    refresh_ms = param.Integer(default=300, bounds=(100, 5000), doc="Push interval: a few Hz at most")

    def __init__(self, **params):
        super().__init__(**params)
        self._version = -1
        self._counters = pn.pane.Markdown(sizing_mode="stretch_width")
        self._status = pn.pane.Str("", sizing_mode="stretch_width")
        self._table = pn.widgets.Tabulator(
            recent_frame(self.model), disabled=True, show_index=False, sizing_mode="stretch_width",
            height=420, name="recent abandoned batches",
        )
        self._layout = pn.Column(
            pn.pane.Markdown("## Lost batches, live"), self._counters, self._table, self._status,
            sizing_mode="stretch_width",
        )
        self.refresh()

    def refresh(self) -> None:
        now = datetime.now(timezone.utc)
        with pn.io.hold():
            self._status.object = status_text(self.model, self.connection(), self.problem(), now)
            if self.model.version == self._version:
                return
            self._version = self.model.version
            five = self.model.counts_by_reason(now, timedelta(minutes=5))
            hour = self.model.counts_by_reason(now, timedelta(hours=1))
            cells = " | ".join(f"**{r}** {five.get(r, 0)} / {hour.get(r, 0)}" for r in REASONS if hour.get(r))
            self._counters.object = f"Last 5 min / 1 h: {cells or 'no lost batches in the last hour'}"
            self._table.value = recent_frame(self.model)

    def __panel__(self):
        return self._layout
