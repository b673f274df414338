"""Where an alert may go: every target an attacker with the Alerts page would pick is refused when the
rule is read, and a resolved address is checked again when it is sent."""

import ipaddress

import pytest

from console.domain.alert_rules import RulesError, parse_rules
from console.domain.notify_targets import NotifyTargets, TargetRefused

# What an operator might list: a hooks host, loopback and a private network on purpose, alerts.* subjects.
LISTED = NotifyTargets(webhook_hosts=("hooks.example.com", "127.0.0.1", "10.1.0.0/16", "169.254.169.254", "fd00::/8"),
                       nats_prefixes=("alerts", "$JS", "$SYS.>", "batch_console", "_INBOX"),
                       reply_prefixes=("_INBOX", "my_replies"))


@pytest.mark.parametrize("target, why", [
    ("webhook:http://169.254.169.254/latest/meta-data/iam", "link-local"),  # listed, and still never
    ("webhook:http://[fe80::1]/x", "link-local"),
    ("webhook:http://[::ffff:169.254.169.254]/x", "link-local"),
    ("webhook:http://10.2.0.1/hook", "not among the allowed"),  # a private address not in the listed network
    ("webhook:http://192.168.1.1/hook", "not among the allowed"),
    ("webhook:http://[fc00::1]/hook", "not among the allowed"),  # ULA outside the listed fd00::/8
    ("webhook:http://0x7f000001/hook", "non-standard form"),
    ("webhook:http://2130706433/hook", "non-standard form"),
    ("webhook:http://127.1/hook", "non-standard form"),
    ("webhook:http:///hook", "names no host"),
    ("webhook:http://hooks.example.com@evil.example.org/", "no user or password"),
    ("webhook:http://evil.example.org/hook", "not among the allowed"),
    ("webhook:http://hooks.example.com.evil.org/hook", "not among the allowed"),
    ("webhook:ftp://hooks.example.com/", "not http(s)"),
    ("webhook:http://0.0.0.0/", "link-local, multicast or reserved"),
    ("webhook:http://hooks.example.com:99999/", "not a URL"),
    ("nats:$JS.API.STREAM.PURGE.ORDERS", "server API"),
    ("nats:$JS.API.STREAM.DELETE.ORDERS", "server API"),
    ("nats:$SYS.REQ.SERVER.PING", "server API"),
    ("nats:$KV.config.key", "server API"),
    ("nats:$O.bucket.x", "server API"),
    ("nats:batch_console.events.atomic_abandoned.ORDERS", "console's own"),
    ("nats:batch_console.quarantine.x", "console's own"),
    ("nats:_INBOX.abc.def", "reply"),
    ("nats:alerts.x.$FI", "reply"),
    ("nats:my_replies.1", "reply"),
    ("nats:other.subject", "not under an allowed subject prefix"),
    ("nats:alertsx.y", "not under an allowed subject prefix"),
    ("nats:alerts.*", "not a subject"),
    ("nats:alerts..x", "not a subject"),
    ("nats:alerts.x\r\nPUB y 1", "printable"),
    ("webhook:http://hooks.example.com/" + "a" * 2000, "notify"),  # past what a rule may hold
    ("mailto:ops@example.com", "nor nats:SUBJECT"),
])
def test_a_target_the_settings_do_not_allow_is_refused_in_a_rules_file_with_its_line(target, why):
    text = f'[[rule]]\nname = "x"\nwhen = "rejected"\nnotify = [{target!r}]\n'.replace("'", '"')
    text = text.replace("\r\n", "\\r\\n")
    with pytest.raises(RulesError) as refused:
        parse_rules(text, LISTED)
    assert refused.value.line == 1 and why in refused.value.reason, refused.value.reason


@pytest.mark.parametrize("target", ["webhook:https://hooks.example.com/batches?x=1", "webhook:http://127.0.0.1:9000/h",
                                    "webhook:http://10.1.2.3/h", "webhook:http://[fd00::5]:8080/h", "nats:alerts",
                                    "nats:alerts.batches.orders"])
def test_a_listed_target_is_taken(target):
    assert LISTED.check(target) == target


def test_by_default_no_target_is_allowed():
    for target in ("webhook:http://127.0.0.1:9000/hook", "webhook:https://hooks.example.com/", "nats:alerts.x"):
        with pytest.raises(TargetRefused):
            NotifyTargets().check(target)


@pytest.mark.parametrize("address, host, refused", [
    ("127.0.0.2", "hooks.example.com", True),  # a listed name that resolves to unlisted loopback now (rebinding)
    ("10.9.9.9", "hooks.example.com", True),
    ("169.254.169.254", "hooks.example.com", True),
    ("10.1.4.4", "hooks.example.com", False),  # inside a listed network
    ("127.0.0.1", "localhost", False),
    ("93.184.216.34", "hooks.example.com", False),
])
def test_the_address_a_name_resolves_to_is_checked_when_it_is_sent(address, host, refused):
    if refused:
        with pytest.raises(TargetRefused):
            LISTED.address(ipaddress.ip_address(address), host)
    else:
        LISTED.address(ipaddress.ip_address(address), host)


def test_every_kind_of_target_has_its_check_and_its_sender():
    """A new kind of target is an entry in TARGET_KINDS, a check_<kind> and a sender: none is left out."""
    from console.alerting.notify import SENDERS
    from console.domain.notify_targets import TARGET_KINDS, NotifyTargets

    assert set(SENDERS) == set(TARGET_KINDS)
    assert all(callable(getattr(NotifyTargets, f"check_{kind}", None)) for kind in TARGET_KINDS)
