"""The alerts as one reader may see them: what fires, was sent and was delivered about a stream it does
not see is absent (a rule, and what concerns no stream, every reader sees)."""

from __future__ import annotations

from typing import Any

from console.domain.live_model import Sees


class SeenAlerts:
    def __init__(self, view: Any, sees: Sees):
        self._view, self._sees = view, sees

    def __getattr__(self, name: str) -> Any:  # the rules, a mute, a save: through the actions, as before
        return getattr(self._view, name)

    def firing(self) -> list[tuple]:
        return [f for f in self._view.firing() if self._sees(f[1] or None)]

    def notices(self) -> list[dict]:
        return [n for n in self._view.notices() if self._sees(n.get("stream") or None)]

    def deliveries(self) -> list[dict]:
        return [d for d in self._view.deliveries() if self._sees(d.get("stream") or None)]
