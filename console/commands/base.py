"""What every command is: its class attributes, the services it works through, who asks for it, and the
registry every command class joins by being defined."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Generic, Protocol, TypeVar

from console.domain.roles import BUILT_IN
from console.errors import ConsoleError
from console.domain.masking import Masking
from console.payloads import Payloads

if TYPE_CHECKING:
    from console.domain.audit import Actor
    from console.broker.admin import StreamAdmin
    from console.broker.consumers import ConsumerAdmin
    from console.broker.connection import Connection
    from console.domain.search import Found, SearchProgress, SearchQuery


T = TypeVar("T")
S = TypeVar("S")
MAX_TARGET = 1000  # characters of a target kept in the audit record


class RuleWriter(Protocol):
    def write_rule(self, text: str) -> str: ...
    def write_muted(self, name: str, muted: bool) -> None: ...


class Searcher(Protocol):
    def __call__(self, asker: Asker, query: SearchQuery, progress: Callable[[SearchProgress], None] | None,
                 cancelled: Callable[[], bool], on_match: Callable[[Found], None] | None
                 ) -> Awaitable[tuple[list[Found], SearchProgress]]: ...


class Asker(Protocol):
    """Who asks for a command, as the command sees them (console.actions.Actions is one): whose payload level
    holds, who is named, whether their session ended. Commands never reach back into the action layer."""

    @property
    def actor(self) -> Actor: ...

    @property
    def ended(self) -> bool: ...

    def payloads(self, stream: str) -> str: ...


@dataclass(frozen=True)
class Services:
    """What commands do their work through; a service a caller was not given is refused by name."""

    streams: StreamAdmin | None = None
    consumers: ConsumerAdmin | None = None
    connection: Callable[[], Connection] | None = None  # the one a probe publishes on now (reopened ones too)
    system_connection: Callable[[], Connection | None] | None = None  # the system account's, where given
    rules: Callable[[], RuleWriter] | None = None
    search: Searcher | None = None
    # the payload pipeline for a reader's level of each stream (Grants.payloads): exports decode through it
    payloads: Callable[[Callable[[str], str]], Payloads] = lambda level: Payloads(Masking(), None, level)


def required(service: S | None, name: str) -> S:
    """The service a command needs; one a caller was not given is refused by name."""
    if service is None:
        raise ConsoleError(f"this console was given no {name} service")
    return service


class Command(Generic[T]):
    name: ClassVar[str]
    role: ClassVar[str]  # the least built-in role that may ask for it (console.domain.roles.BUILT_IN)
    changes_server: ClassVar[bool]  # refused in read-only mode
    records: ClassVar[str]  # what its audit record holds beside who, when and the outcome

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            assert cls.name not in COMMANDS and cls.role in BUILT_IN, cls.name
            COMMANDS[cls.name] = cls

    @property
    def target(self) -> str:
        raise NotImplementedError

    @property
    def on_stream(self) -> str | None:
        """The stream it acts on, for the roles' per-stream grants (None: no one stream)."""
        return None

    @property
    def also_on_streams(self) -> tuple[str, ...]:
        """More streams it acts on (a republish's target), each checked as `on_stream` is."""
        return ()

    def diff(self) -> dict[str, list[Any]] | None:
        return None

    def said(self, result: T) -> str:
        """What its audit record says of an accepted outcome ("": nothing beyond it)."""
        return ""

    async def execute(self, services: Services, asker: Asker) -> T:
        raise NotImplementedError


COMMANDS: dict[str, type[Command[Any]]] = {}  # name -> class, filled by the classes below


def bounded(target: str) -> str:
    return target if len(target) <= MAX_TARGET else target[:MAX_TARGET - 1] + "…"
