"""The alerts as one reader may see them: what fires, was sent and was delivered about a stream it does
not see is absent (a rule, and what concerns no stream, every reader sees). A page holds this, never the
alerts view itself: it reads, and asks for a change through the actions; the view's writers are the
commands' alone."""

from __future__ import annotations

from typing import Any

from console.domain.live_model import Sees


class SeenAlerts:
    def __init__(self, view: Any, sees: Sees):
        self._view, self._sees = view, sees

    @property
    def several(self) -> bool:
        """Several systems' alerts (each row with its system): the page shows a system column."""
        return bool(getattr(self._view, "several", False))

    def rules(self) -> tuple[list[Any], str | None]:
        rules: tuple[list[Any], str | None] = self._view.rules()
        return rules

    async def save_rule(self, text: str, actions: Any) -> str:  # the action alert_rule.save
        return str(await self._view.save_rule(text, actions))

    async def set_muted(self, name: str, muted: bool, actions: Any) -> None:  # alert_rule.mute / unmute
        await self._view.set_muted(name, muted, actions)

    def firing(self) -> list[tuple[Any, ...]]:
        return [f for f in self._view.firing() if self._sees(f[1] or None)]

    def notices(self) -> list[dict[str, Any]]:
        return [n for n in self._view.notices() if self._sees(n.get("stream") or None)]

    def deliveries(self) -> list[dict[str, Any]]:
        return [d for d in self._view.deliveries() if self._sees(d.get("stream") or None)]
