"""Roles over actions and streams, read strictly; what the action layer does with them; the signed-in
session's cookie and the provider's claims, read as hostile input."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from console.actions import Actions
from console.commands import COMMANDS as ACTIONS
from console.commands import LEAST_ROLE, EditStream, RunSearch
from tests.commands import doing
from console.domain.audit import Actor
from console.domain.masking import load_masking
from console.domain.roles import FULL, MASKED, NONE, RolesError, load_roles
from console.errors import ForbiddenError
from console.oidc import Session, user_groups, user_name

FILE = """
[[role]]
name = "orders-operator"
actions = ["message.*", "consumer.fetch"]
streams = ["ORDERS*"]
payloads = ["ORDERS_TEST"]
masked_payloads = ["ORDERS*"]

[[group]]
name = "orders-team"
roles = ["viewer", "orders-operator"]

[[group]]
name = "*"
roles = ["viewer"]
"""


def test_the_built_in_roles_are_the_registry_s_least_roles_each_holding_the_ones_before():
    roles = load_roles("", LEAST_ROLE).roles
    assert roles["viewer"].actions == {"export.csv", "export.report", "search.run", "export.search"}
    assert roles["operator"].actions == roles["viewer"].actions | {
        "message.ack", "message.nak", "message.term", "message.in_progress", "consumer.fetch", "probe.run",
        "alert_rule.mute", "alert_rule.unmute", "canary.run",
        "consumer.pause", "consumer.resume", "consumer.reset", "consumer.unpin", "message.publish",
        "message.republish", "batch.republish"}
    assert roles["admin"].actions == set(ACTIONS)


def test_a_group_s_roles_allow_their_actions_on_their_streams_only_and_say_why_not():
    grants = load_roles(FILE, LEAST_ROLE).for_groups(("orders-team", "unknown"))
    assert grants.names == "viewer, orders-operator"
    assert grants.why_not("message.ack", "ORDERS_EU") is None
    assert grants.why_not("message.ack") is None  # allowed on some stream: the control is on until one is chosen
    assert grants.why_not("message.ack", "PAYMENTS") == \
        "viewer, orders-operator may message.ack only on streams ORDERS*, not on PAYMENTS"
    assert grants.why_not("stream.edit", "ORDERS") == "the roles viewer, orders-operator may not stream.edit"
    assert grants.why_not("search.run", "PAYMENTS") is None  # the viewer's, on every stream


def test_payloads_are_shown_as_stored_masked_or_not_at_all_as_the_roles_say():
    roles = load_roles(FILE, LEAST_ROLE)
    team, everyone = roles.for_groups(("orders-team",)), roles.grants("orders-operator")
    assert team.payloads("ORDERS_TEST") == FULL
    assert team.payloads("ORDERS_EU") == MASKED
    assert team.payloads("PAYMENTS") == MASKED  # the viewer's: masked everywhere
    assert everyone.payloads("PAYMENTS") == NONE
    masking = load_masking('[[mask]]\nstreams = ["ORDERS*"]\nfields = ["card"]\nheaders = ["Authorization"]\n')
    message = ((("Authorization", "Bearer t"),), b'{"card": "4111", "n": 1}')
    assert masking.apply("ORDERS_TEST", *message, level=FULL) == message
    assert masking.apply("ORDERS_EU", *message, level=MASKED) == \
        ((("Authorization", "***"),), b'{"card": "***", "n": 1}')
    assert masking.apply("PAYMENTS", *message, level=NONE)[1] == b"(not shown to your role: 24 bytes)"
    assert load_masking("", payloads=False).apply("ORDERS_TEST", *message, level=FULL)[1] == \
        b"(payloads are off: 24 bytes)"  # --no-payloads is for everyone


def test_a_user_of_no_mapped_group_gets_no_role_unless_everyone_is_mapped():
    without_everyone = load_roles(FILE.replace('name = "*"', 'name = "staff"'), LEAST_ROLE)
    assert without_everyone.for_groups(("guests",)).roles == ()
    assert load_roles(FILE, LEAST_ROLE).for_groups(("guests",)).names == "viewer"


@pytest.mark.parametrize(("text", "line", "reason"), [
    ('[[role]]\nname = "r"\nactions = ["stream.delete"]\n', 1, "unknown action 'stream.delete'"),
    ('\n[[group]]\nname = "g"\nroles = ["root"]\n', 2, "unknown role 'root'"),
    ('[[role]]\nname = "r"\nactions = "stream.edit"\n', 1, "actions: a list"),
    ('[[role]]\nname = "r"\nactions = [1]\n', 1, "actions: a list"),
    ('[[role]]\nname = "r\\u001b[31m"\n', 1, "name: letters"),
    ('[[role]]\nname = "' + "r" * 65 + '"\n', 1, "name: letters"),
    ('[[role]]\nname = "r"\nstreams = []\n', 1, "streams: at least one"),
    ('[[role]]\nname = "r"\nstreams = ["' + "S" * 300 + '"]\n', 1, "streams: a list"),
    ('[[role]]\nname = "r"\nowner = "me"\n', 1, "unknown key 'owner'"),
    ('[[role]]\nname = "r"\n[[role]]\nname = "r"\n', 3, "defined twice"),
    ('[[group]]\nname = "g\\u0000"\nroles = ["viewer"]\n', 1, "name: the group"),
    ('[[group]]\nname = "g"\nroles = []\n', 1, "roles: at least one role"),
    ('[[group]]\nname = "g"\nroles = ["viewer"]\n[[group]]\nname = "g"\nroles = ["admin"]\n', 4, "mapped twice"),
    ('[users]\nalice = "admin"\n', None, "unknown table or key: users"),
    ('[[role]\n', 1, "not TOML"),
    ("role = " + "[" * 5000 + "]" * 5000 + "\n", None, "not TOML"),
])
def test_a_roles_file_with_an_error_is_refused_with_its_line(text, line, reason):
    with pytest.raises(RolesError) as refused:
        load_roles(text, LEAST_ROLE)
    assert reason in refused.value.reason
    assert refused.value.line == line


def test_the_action_layer_refuses_what_the_roles_do_not_allow_for_every_caller():
    viewer = load_roles("", LEAST_ROLE).grants("viewer")
    actions = Actions(None, Actor("vera"), grants=viewer, trail_required=False)
    assert actions.allowed(EditStream, "ORDERS") == "the role viewer may not stream.edit"
    changed = []
    with pytest.raises(ForbiddenError, match="stream.edit is refused: the role viewer may not stream.edit"):
        asyncio.run(actions.run(doing(EditStream, stream="ORDERS", work=lambda: changed.append(1))))
    assert changed == []
    assert asyncio.run(actions.run(doing(RunSearch, stream="ORDERS", work=lambda: "found"))) == "found"


def test_an_ended_session_may_no_longer_act_whatever_its_roles():
    admin = load_roles("", LEAST_ROLE).grants("admin")
    ended = Actions(None, Actor("ada"), grants=admin, trail_required=False,
                    expires=datetime.now(timezone.utc) - timedelta(seconds=1))
    assert ended.allowed(RunSearch) == "the session has expired: sign in again"
    with pytest.raises(ForbiddenError, match="session has expired"):
        asyncio.run(ended.run(doing(RunSearch, stream="ORDERS")))


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[" * 10_000, b'{"user": "ada"}', b"x" * 20_000,
                                   b'{"user": 1, "groups": [], "iss": "i", "exp": 1, "sid": "s"}',
                                   b'{"user": "a", "groups": [1], "iss": "i", "exp": 1, "sid": "s"}',
                                   b'{"user": "a", "groups": "g", "iss": "i", "exp": "never", "sid": "s"}'])
def test_a_session_cookie_that_is_not_one_reads_as_none(value):
    assert Session.from_cookie(value) is None


def test_a_session_reads_back_what_it_wrote():
    session = Session("ada", ("admins",), "http://idp", 1e9, "sid")
    assert Session.from_cookie(session.to_cookie()) == session


def test_the_provider_s_claims_are_bounded_and_printable():
    assert user_groups({"groups": "admins"}, "groups") == ("admins",)
    assert user_groups({}, "groups") is None
    assert user_groups({"groups": ["ok", "bad\x1b[31m", 7, "", "x" * 300] + ["g"] * 500}, "groups") == \
        ("ok", *["g"] * 199)
    assert user_name({"preferred_username": "a\nb", "sub": "s"}, "preferred_username") == "a?b"
    assert user_name({"preferred_username": "", "email": None, "sub": "s-1"}, "preferred_username") == "s-1"


def test_every_toml_file_the_console_reads_refuses_deep_nesting_as_one_error():
    from console.domain.alert_rules import RulesError, parse_rules
    from console.domain.masking import MaskRulesError

    deep = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    for read, error in ((lambda t: load_roles(t, LEAST_ROLE), RolesError), (load_masking, MaskRulesError),
                        (parse_rules, RulesError)):
        with pytest.raises(error, match="nested too deeply"):
            read(deep)


@pytest.mark.parametrize("endpoint, expected", [
    ("https://idp.example/logout", "https://idp.example/logout?client_id=console&post_logout_redirect_uri="
                                   "https%3A%2F%2Fconsole.example%2Flogout"),
    ("https://idp.example/end?tenant=a", "https://idp.example/end?tenant=a&client_id=console&post_logout_redirect_uri="
                                         "https%3A%2F%2Fconsole.example%2Flogout"),
    (None, None), (["https://idp.example/logout"], None), ("javascript:alert(1)", None), ("//evil.example/x", None),
])
def test_sign_out_at_the_provider_goes_only_to_the_endpoint_its_discovery_names(endpoint, expected):
    from console.config import AccessSettings
    from console.oidc import Provider

    discovery = {} if endpoint is None else {"end_session_endpoint": endpoint}
    provider = Provider(AccessSettings(oidc_issuer="https://idp.example", oidc_client_id="console"), discovery)
    assert provider.end_session_url("https://console.example/logout") == expected


def test_a_role_may_be_limited_to_systems_of_a_systems_file():
    roles = load_roles(FILE.replace('masked_payloads = ["ORDERS*"]', 'masked_payloads = ["ORDERS*"]\nsystems = ["prod-*"]'),
                       LEAST_ROLE)
    grants = roles.for_groups(("orders-team",))
    assert grants.on_system("prod-eu").why_not("message.ack", "ORDERS") is None
    assert "may not message.ack" in grants.on_system("staging").why_not("message.ack", "ORDERS")
    assert grants.on_system("prod-eu").payloads("ORDERS_TEST") == FULL
    assert grants.on_system("staging").payloads("ORDERS_TEST") == MASKED  # the group's viewer role holds there
    assert roles.grants("viewer").on_system("staging").names == "viewer"  # the built-in roles: every system
    for hostile in ('"prod"', "[]", "[1]", f'["{"x" * 300}"]', '["a\\u0000"]'):
        with pytest.raises(RolesError, match="systems"):
            load_roles(f'[[role]]\nname = "r"\nactions = ["message.ack"]\nsystems = {hostile}\n', LEAST_ROLE)
