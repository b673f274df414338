"""Stream batch settings on the server: read them, change them with a stream update."""

from __future__ import annotations

from dataclasses import dataclass

import nats.js.errors
from nats.aio.client import Client
from nats.js.api import PersistMode

from console.domain.stream_settings import StreamBatchSettings

EDITABLE = ("allow_atomic", "allow_batched", "persist_mode")


@dataclass(frozen=True)
class ServerInfo:
    version: str | None
    api_level: int | None


@dataclass(frozen=True)
class Refusal(Exception):
    """The server refused a change: its own code, err_code and text, for the form."""

    code: int | None
    err_code: int | None
    description: str

    def __str__(self) -> str:
        return f"[{self.err_code}] {self.description}"


class StreamAdmin:
    def __init__(self, nc: Client):
        self.nc = nc
        self.js = nc.jetstream()

    async def server(self) -> ServerInfo:
        info = await self.js.account_info()
        v = self.nc.connected_server_version
        return ServerInfo(f"{v.major}.{v.minor}.{v.patch}" if v else None, info.api.level if info.api else None)

    async def streams(self) -> list[StreamBatchSettings]:
        return sorted((StreamBatchSettings.from_config(s.config.as_dict()) for s in await self.js.streams_info()),
                      key=lambda s: s.name)

    async def apply(self, name: str, **changes) -> StreamBatchSettings:
        """Update the stream with these batch settings; Refusal carries the server's answer."""
        unknown = set(changes) - set(EDITABLE)
        if unknown:
            raise ValueError(f"not batch settings: {sorted(unknown)}")
        config = (await self.js.stream_info(name)).config
        for key, value in changes.items():
            setattr(config, key, PersistMode(value) if key == "persist_mode" else value)
        try:
            updated = await self.js.update_stream(config)
        except nats.js.errors.APIError as e:
            raise Refusal(e.code, e.err_code, e.description or str(e)) from None
        return StreamBatchSettings.from_config(updated.config.as_dict())
