"""Who published a batch, as the server knows the connection (CONNZ), never as the client says it.

The collector asks CONNZ, as the system account, for the connection of the tapped reply's account
that is subscribed to the reply subject: its client name, language and version, user, account,
address, server and connection id. Every field comes from the wire and is bounded; a reply that is
not a CONNZ answer is MalformedPublisher.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.domain.wire import MAX_LABEL, MalformedInput, bounded_int, label, load_object

NO_SYSTEM_ACCOUNT = "publisher unknown: no system account"
MAX_CID = 2**63 - 1
MAX_CONNECTIONS = 16  # a reply subject has one subscriber; more in an answer is not a publisher's inbox
_TEXT = ("name", "lang", "version", "account", "user", "address", "server", "start")


class MalformedPublisher(MalformedInput):
    what = "CONNZ answer"


@dataclass(frozen=True, slots=True)
class Publisher:
    name: str | None = None  # the client's connection name
    lang: str | None = None
    version: str | None = None
    account: str | None = None
    user: str | None = None
    address: str | None = None  # ip:port as the server saw it
    server: str | None = None  # the server's name
    cid: int | None = None  # the connection id on that server
    start: str | None = None  # when the connection started, as the server wrote it

    def line(self) -> str:
        """One line for a table cell or a notification."""
        client = " ".join(p for p in (self.lang, self.version) if p)
        who = (self.name or "(no connection name)") + (f" ({client})" if client else "")
        where = ", ".join(p for p in (f"user {self.user}" if self.user else None,
                                      f"account {self.account}" if self.account else None, self.address,
                                      f"cid {self.cid} on {self.server}" if self.cid is not None else None) if p)
        return f"{who}, {where}" if where else who

    def budget_key(self) -> str:
        """The publisher as loss objectives name it, "order-svc (python 2.7)": the line's part before its
        first ", " (as console.analytics.budgets.publisher_key cuts it)."""
        return self.line().split(", ", 1)[0]

    def to_dict(self) -> dict[str, object]:
        return {key: getattr(self, key) for key in (*_TEXT, "cid") if getattr(self, key) is not None}


def publisher_from_dict(obj: object, error: type[MalformedInput] = MalformedPublisher) -> Publisher:
    """A publisher as an event carries it (hostile: bounded labels, a bounded connection id)."""
    if not isinstance(obj, dict):
        raise error("'publisher' is not an object")
    cid = obj.get("cid")
    return Publisher(**{key: label(obj, key) for key in _TEXT},
                     cid=None if cid is None else bounded_int(cid, "cid", 0, MAX_CID, error))


def publishers_from_connz(data: bytes | str, prefix: str) -> list[Publisher]:
    """The connections of one server's CONNZ answer (asked with auth, subscriptions, the account and the
    reply subject) that subscribe under the reply `prefix` itself: a tap on `_INBOX.*...` (the collector's
    own, a `nats sub '>'`) hears the reply too, but only the publisher subscribes to its own inbox."""
    obj = load_object(data, MalformedPublisher)
    if obj.get("error") is not None:
        raise MalformedPublisher(f"CONNZ refused: {str(obj.get('error'))[:200]}")
    server, body = obj.get("server"), obj.get("data")
    if not isinstance(server, dict) or not isinstance(body, dict):
        raise MalformedPublisher("not a CONNZ answer (no server or data)")
    connections = body.get("connections") or []
    if not isinstance(connections, list) or len(connections) > MAX_CONNECTIONS:
        raise MalformedPublisher(f"'connections' is not a list of at most {MAX_CONNECTIONS}")
    found = []
    for c in connections:
        if not isinstance(c, dict):
            raise MalformedPublisher("a connection is not an object")
        subscriptions = c.get("subscriptions_list") or []
        if not isinstance(subscriptions, list):
            raise MalformedPublisher("'subscriptions_list' is not a list")
        if not any(isinstance(sub, str) and (sub == prefix or sub.startswith(prefix + ".")) for sub in subscriptions):
            continue
        ip, port = label(c, "ip"), c.get("port")
        address = f"{ip}:{bounded_int(port, 'port', 0, 65535, MalformedPublisher)}" if ip and port is not None else ip
        cid = c.get("cid")
        found.append(Publisher(
            name=label(c, "name"), lang=label(c, "lang"), version=label(c, "version"), account=label(c, "account"),
            user=label(c, "authorized_user"), address=address if address and len(address) <= MAX_LABEL else None,
            server=label(server, "name"), cid=None if cid is None else bounded_int(cid, "cid", 0, MAX_CID,
                                                                                 MalformedPublisher),
            start=label(c, "start")))
    return found
