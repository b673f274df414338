"""Where an alert may be sent. A rules file, or a rule saved from the Alerts page, names its targets;
the operator's settings say which are allowed. A webhook goes only to a host on the allow-list (names,
addresses, networks), never to a link-local address (a cloud's metadata service), and to a loopback or
private address only when that address is listed; a NATS target only under an allowed prefix, never on
the server's APIs, the console's own subjects or a reply subject. Checked when a rule is read and
again, on the one resolved address it is sent to, when it is sent."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never a notification's subject, whatever is allowed: the server's APIs and system subjects, KV and
# object stores, inboxes (replies go to whoever asked), and fast-ingest reply subjects.
NEVER_SUBJECTS = ("$JS.", "$SYS.", "$KV.", "$O.", "$JSC.", "$NRG.", "_INBOX.", "_R_.")
MAX_TARGET = 1024


# Every kind of notify target, each checked here by check_<kind> and delivered by console.alerting.notify's
# sender of the same kind: a new kind is an entry, a check and a sender (a test holds the three together).
TARGET_KINDS = {"webhook": "webhook:http(s)://...", "nats": "nats:SUBJECT"}


class TargetRefused(ValueError):
    """A notify target the settings do not allow: why, for the rules file's line or the delivery log."""


@dataclass(frozen=True)
class NotifyTargets:
    webhook_hosts: tuple[str, ...] = ()  # host names, IP addresses and networks (CIDR) a webhook may reach
    nats_prefixes: tuple[str, ...] = ()  # subjects (and what is under them) a notice may be published on
    own_prefixes: tuple[str, ...] = ("batch_console",)  # the console's own subjects: never a target
    reply_prefixes: tuple[str, ...] = ("_INBOX",)  # the inboxes the collector taps: never a target

    def check(self, target: str) -> str:
        """The target when allowed; TargetRefused saying why otherwise."""
        if not isinstance(target, str) or len(target) > MAX_TARGET or any(ord(c) < 32 or ord(c) == 127 for c in target):
            raise TargetRefused(f"a notify target is at most {MAX_TARGET} printable characters")
        kind, _, where = target.partition(":")
        if kind not in TARGET_KINDS:
            raise TargetRefused(f"notify target {target[:80]!r} is not {' nor '.join(TARGET_KINDS.values())}")
        getattr(self, f"check_{kind}")(where)
        return target

    def check_webhook(self, url: str) -> None:
        self.webhook_host(url)

    def check_nats(self, subject: str) -> None:
        self.subject(subject)

    def webhook_host(self, url: str) -> tuple[str, int]:
        """(host, port) of an allowed webhook URL."""
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise TargetRefused(f"webhook {url[:80]!r} is not a URL") from None
        if parts.scheme not in ("http", "https"):
            raise TargetRefused(f"webhook {url[:80]!r} is not http(s)://")
        if parts.username is not None or parts.password is not None:
            raise TargetRefused("a webhook URL holds no user or password (put a token in its path)")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise TargetRefused(f"webhook {url[:80]!r} names no host")
        address = _literal(host)
        if address is None:
            if host not in self._names():
                raise TargetRefused(f"webhook host {host!r} is not among the allowed webhook hosts "
                                    "(--webhook-hosts / BATCH_CONSOLE_WEBHOOK_HOSTS)")
        else:
            self.address(address, host)
        return host, port

    def address(self, address: Address, host: str) -> None:
        """An address a webhook is sent to (the literal in its URL, or the one its name resolved to)."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_link_local or address.is_multicast or address.is_unspecified or address.is_reserved:
            raise TargetRefused(f"webhook host {host!r} is at {address}, a link-local, multicast or reserved "
                                "address: never notified")
        listed = any(address in network for network in self._networks())
        if listed:
            return
        if _literal(host) is not None:
            raise TargetRefused(f"webhook address {address} is not among the allowed webhook hosts "
                                "(--webhook-hosts / BATCH_CONSOLE_WEBHOOK_HOSTS)")
        if address.is_loopback or address.is_private:
            if not (address.is_loopback and host == "localhost"):
                raise TargetRefused(f"webhook host {host!r} resolved to {address}, a loopback or private address "
                                    "that is not listed in the allowed webhook hosts")

    def subject(self, subject: str) -> str:
        tokens = subject.split(".")
        if not subject or "" in tokens or any(c in subject for c in " \t*>"):
            raise TargetRefused(f"nats target {subject[:80]!r} is not a subject (no wildcards, no empty tokens)")
        never = (*NEVER_SUBJECTS, *(p.rstrip(".") + "." for p in (*self.own_prefixes, *self.reply_prefixes)))
        if subject.startswith(never) or subject in {p.rstrip(".") for p in never} or "$FI" in tokens:
            raise TargetRefused(f"nats target {subject[:80]!r} is a server API, a reply or the console's own "
                                "subject: never a notification's")
        allowed = [p.removesuffix(".>").rstrip(".") for p in self.nats_prefixes]
        if not any(subject == p or subject.startswith(p + ".") for p in allowed if p):
            raise TargetRefused(f"nats target {subject[:80]!r} is not under an allowed subject prefix "
                                "(--notify-subjects / BATCH_CONSOLE_NOTIFY_SUBJECTS)")
        return subject

    def _names(self) -> set[str]:
        return {h.lower().rstrip(".") for h in self.webhook_hosts if _network(h) is None}

    def _networks(self) -> list[Network]:
        return [n for n in map(_network, self.webhook_hosts) if n is not None]


def _network(entry: str) -> Network | None:
    try:
        return ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return None


def _literal(host: str) -> Address | None:
    """The address a host names literally; TargetRefused for one in a form that hides what it is
    (0x7f000001, 2130706433, 127.1: a resolver takes them as addresses)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if "%" in host:
        raise TargetRefused(f"webhook host {host[:80]!r} has a zone: not allowed")
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    raise TargetRefused(f"webhook host {host[:80]!r} is an IP address in a non-standard form")
