"""Stream batch settings on the server: read them, change them with a stream update."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.aio.client import Client
from nats.js.api import AckPolicy, PersistMode, StreamInfo

from console.broker import names
from console.broker.nats_internals import server_info
from console.broker.publish import Republished, publish_one, republish
from console.broker.pull import BatchReplay, ConsumerReader, replay_batch
from console.domain.messages import PullConsumer
from console.domain.replies import PubAck
from console.domain.checks import StreamFacts, StreamPage
from console.domain.server_versions import ServerRelease
from console.domain.stream_settings import EDITABLE, StreamBatchSettings
from console.errors import ReadOnlyError, Refusal



@dataclass(frozen=True)
class StreamPlacement:
    settings: StreamBatchSettings
    leader: str | None  # None on a single server
    replicas: tuple[tuple[str, bool, int], ...]  # (server, current, lag) of the followers
    messages: int
    bytes: int
    last_seq: int = 0


class StreamAdmin:
    """Reads and changes streams; in read-only mode every change is refused here, whatever calls it."""

    def __init__(self, nc: Client, read_only: bool = False):
        self.read_only = read_only
        self.rebind(nc)

    def rebind(self, nc: Client) -> None:
        """Work on a new connection (the runtime opened one after the server closed the last)."""
        self.nc = nc
        self.js = nc.jetstream()
        self.last_streams: list[StreamBatchSettings] = []  # the last listing: a new page shows it until it asks

    async def server(self) -> ServerRelease:
        """The release of the server this connection is on, and its JetStream API level."""
        info = await self.js.account_info()
        level = info.api.level if info.api else None
        return ServerRelease(str(server_info(self.nc).get("version") or ""),
                             level if isinstance(level, int) and not isinstance(level, bool) else None)

    async def streams(self) -> list[StreamBatchSettings]:
        self.last_streams = sorted((_settings(info) for info in await self.js.streams_info()), key=lambda s: s.name)
        return self.last_streams

    async def stream_facts(self, domain: str | None = None) -> tuple[list[StreamFacts], dict[str, str]]:
        """Every stream with what the health checks read of it (of a leaf's domain: its streams), and those
        the server holds offline (a config its release cannot load): one listing, a request per page."""
        return await list_streams(self.nc, domain)

    async def stream(self, name: str) -> StreamPlacement:
        """One stream's batch settings, where it runs and how many messages it holds."""
        info = await self.js.stream_info(names.stream(name))
        cluster = info.cluster
        replicas = tuple((r.name or "?", bool(r.current), r.lag or 0) for r in (cluster.replicas or [])) if cluster else ()
        return StreamPlacement(_settings(info), cluster.leader if cluster else None, replicas, info.state.messages,
                               info.state.bytes, info.state.last_seq)

    async def consumers(self, stream: str) -> list[PullConsumer]:
        """The stream's durable pull consumers (push consumers cannot be fetched from)."""
        found = [PullConsumer(c.name, c.config.ack_policy != AckPolicy.NONE, c.num_ack_pending or 0, c.num_pending or 0)
                 for c in await self.js.consumers_info(names.stream(stream))
                 if c.config.durable_name and not c.config.deliver_subject]
        return sorted(found, key=lambda c: c.name)

    def reader(self, stream: str, durable: str | None = None, **start: Any) -> ConsumerReader:
        """A cursor for Replay: on a durable pull consumer, or a peek when `durable` is None."""
        return ConsumerReader(self.nc, stream, durable, read_only=self.read_only, **start)

    async def replay_batch(self, stream: str, batch_id: str, **options: Any) -> BatchReplay:
        return await replay_batch(self.nc, stream, names.batch_id(batch_id), **options)

    async def leader(self, name: str) -> str | None:
        """The stream's leader's server name (None on a single server)."""
        cluster = (await self.js.stream_info(names.stream(name))).cluster
        return cluster.leader if cluster else None

    async def step_down(self, name: str, preferred: str | None = None) -> None:
        """Ask the stream's leader to step down: the replicas elect another (what a rolling restart does),
        or hand it to the `preferred` server (by name; nats-server 2.11 and later)."""
        if self.read_only:
            raise ReadOnlyError("read-only mode: stream leaders are not stepped down")
        await leader_step_down(self.nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{names.stream(name)}", preferred)

    async def publish(self, stream: str, subject: str, payload: bytes, headers: tuple[tuple[str, str], ...]) -> PubAck:
        """One message on a subject of the stream (console.broker.publish)."""
        if self.read_only:
            raise ReadOnlyError("read-only mode: nothing is published")
        return await publish_one(self.nc, stream, subject, payload, headers)

    async def republish(self, stream: str, first: int, last: int, to_stream: str, to_subject: str) -> list[Republished]:
        """Stored messages again on a subject (console.broker.publish)."""
        if self.read_only:
            raise ReadOnlyError("read-only mode: nothing is published")
        return await republish(self.nc, stream, first, last, to_stream, to_subject)

    async def apply(self, name: str, **changes: Any) -> StreamBatchSettings:
        """Update the stream with these batch settings; Refusal carries the server's answer."""
        if self.read_only:
            raise ReadOnlyError("read-only mode: stream settings are not changed")
        unknown = set(changes) - set(EDITABLE)
        if unknown:
            raise ValueError(f"not batch settings: {sorted(unknown)}")
        config = (await self.js.stream_info(names.stream(name))).config
        for key, value in changes.items():
            setattr(config, key, PersistMode(value) if key == "persist_mode" else value)
        try:
            updated = await self.js.update_stream(config)
        except nats.js.errors.APIError as e:
            raise Refusal(e.code, e.err_code, e.description or str(e)) from None
        return StreamBatchSettings.from_config(updated.config.as_dict())


def _settings(info: StreamInfo) -> StreamBatchSettings:
    """A stream's batch settings from its info: the config, and how many consumers it has now."""
    return StreamBatchSettings.from_config(info.config.as_dict()).with_changes(consumers=info.state.consumer_count)


async def list_streams(nc: Client, domain: str | None = None) -> tuple[list[StreamFacts], dict[str, str]]:
    """Every stream as the server lists it (of another JetStream domain's, a leaf's: through its API prefix),
    and those it holds offline with why: a request per page."""
    api = names.api_prefix(domain or None)
    streams: list[StreamFacts] = []
    offline: dict[str, str] = {}
    while True:
        reply = await nc.request(f"{api}.STREAM.LIST", json.dumps({"offset": len(streams)}).encode(), timeout=5)
        page = StreamPage.parse(reply.data)
        streams += page.streams
        offline.update(page.offline)
        if not page.streams or len(streams) >= page.total:
            return streams, offline


async def leader_step_down(nc: Client, subject: str, preferred: str | None = None) -> None:
    """A stream's or consumer's leader steps down (its STEPDOWN subject), to `preferred` where the server takes
    a placement (2.11 and later); Refusal with the server's code and text."""
    await js_api(nc, subject, {"placement": {"preferred": preferred}} if preferred else None)


async def js_api(nc: Client, subject: str, request: dict[str, Any] | None, timeout: float = 5.0) -> dict[str, Any]:
    """A JetStream API request's answer; Refusal with the server's code and text."""
    reply = await nc.request(subject, json.dumps(request).encode() if request is not None else b"", timeout=timeout)
    try:
        answer = json.loads(reply.data or b"{}")
    except ValueError:
        raise Refusal(0, 0, f"not a JetStream API answer: {reply.data[:100]!r}") from None
    if not isinstance(answer, dict):
        raise Refusal(0, 0, "not a JetStream API answer")
    if isinstance(answer.get("error"), dict):
        e = answer["error"]
        raise Refusal(e.get("code", 0), e.get("err_code", 0), str(e.get("description", ""))[:300])
    return answer
