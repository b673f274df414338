"""The systems file: every NATS system in one console. Strict and hostile-proof: each way it can be
wrong is refused with its line, and no refusal repeats a password or a token."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.domain.systems import MAX_SYSTEMS, SystemsError, each_account, load_systems

EXAMPLE = '''\
[[system]]
name = "prod-eu"
servers = ["nats://a:4222", "nats://b:4222"]
creds = "/run/secrets/prod-eu.creds"
system_creds = "/run/secrets/prod-eu-sys.creds"
monitor_url = "http://a:8222"
[[system.account]]
name = "BILLING"
creds = "/run/secrets/billing.creds"

[[system]]
name = "staging"
servers = ["tls://s:4222"]
user = "ops"
password = "s3cret-staging"
system_user = "sys"
system_password = "s3cret-sys"
'''


def test_the_readme_example_reads_as_written():
    prod, staging = load_systems(EXAMPLE)
    assert (prod.name, prod.servers, prod.credentials.creds, prod.monitor_url) == \
        ("prod-eu", ("nats://a:4222", "nats://b:4222"), "/run/secrets/prod-eu.creds", "http://a:8222")
    assert prod.system_account is not None and prod.system_account.creds == "/run/secrets/prod-eu-sys.creds"
    [billing] = prod.accounts
    assert (billing.name, billing.credentials.creds, billing.line) == ("BILLING", "/run/secrets/billing.creds", 7)
    assert (staging.line, staging.credentials.user, staging.system_account.user) == (11, "ops", "sys")
    assert [p for _, p, _ in prod.paths()] == ["/run/secrets/prod-eu.creds", "/run/secrets/prod-eu-sys.creds",
                                              "/run/secrets/billing.creds"]
    assert "s3cret" not in repr(staging)  # a repr in a log never carries a secret


def one(**keys: str) -> str:
    body = "".join(f"{k} = {v}\n" for k, v in keys.items())
    return f'[[system]]\nname = "a"\nservers = ["nats://h:4222"]\n{body}'


@pytest.mark.parametrize("text, reason, line", [
    (EXAMPLE + '[[system]]\nname = "prod-eu"\nservers = ["nats://x:1"]\n', "named twice", 18),
    (one(servres='["nats://h:1"]'), "unknown key 'servres'", 1),
    ('[[sytem]]\nname = "a"\n', "unknown table or key 'sytem'", 1),
    ('[[system]]\nname = "prod eu"\nservers = ["nats://h:1"]\n', "name: letters, digits", 1),
    ('[[system]]\nname = "a.b"\nservers = ["nats://h:1"]\n', "name: letters, digits", 1),
    ('[[system]]\nname = "-a"\nservers = ["nats://h:1"]\n', "name: letters, digits", 1),
    ('[[system]]\nname = "' + "a" * 33 + '"\nservers = ["nats://h:1"]\n', "name: letters, digits", 1),
    ('[[system]]\nname = 7\nservers = ["nats://h:1"]\n', "name: letters, digits", 1),
    ('[[system]]\nname = "a"\nservers = "nats://h:1"\n', "servers: a list", 1),
    ('[[system]]\nname = "a"\nservers = []\n', "servers: a list", 1),
    ('[[system]]\nname = "a"\nservers = ["http://h:1"]\n', "servers: a list", 1),
    ('[[system]]\nname = "a"\nservers = ["nats://u:hunter2@h:1"]\n', "not in the URL", 1),
    (one(monitor_url='"javascript:alert(1)"'), "monitor_url", 1),
    (one(monitor_url='"http://a:8222/varz?x=1"'), "monitor_url", 1),
    (one(creds='"/a.creds"', token='"t0k3n"'), "one kind of credential", 1),
    (one(user='"ops"'), "user and password go together", 1),
    (one(system_password='"x"'), "system_password without system_user", 1),
    (one(tls_cert='"/c.pem"'), "tls_cert and tls_key go together", 1),
    (one(creds='"/a\\u0007.creds"'), "creds: a text", 1),
    (one(creds=f'"{"x" * 1025}"'), "creds: a text", 1),
    (one(creds="[1]"), "creds: a text", 1),
    (one() + '[[system.account]]\nname = "B"\n', "its own user", 4),
    (one() + '[[system.account]]\nname = "B"\ntoken = "t"\n[[system.account]]\nname = "B"\ntoken = "u"\n',
     "named twice", 7),
    (one() + '[[system.account]]\nname = "B"\ntoken = "t"\nroles = 1\n', "unknown key 'roles'", 4),
    ("[[system]\n", "not TOML", 1),
    ("", "at least one", None),
    ("system = 1\n", "at least one", None),
    ("[[system]]\nx = " + "[" * 5000 + "]" * 5000 + "\n", "not TOML", None),  # nested past the parser
    (one(domains='"leaf1"'), "domains: a list", 1),
    (one(domains='["leaf.1"]'), "domains: a JetStream domain name", 1),
    (one(domains='["leaf*"]'), "domains: a JetStream domain name", 1),
    (one(domains='["leaf 1"]'), "domains: a JetStream domain name", 1),
    (one(domains='["leaf\\u0000"]'), "domains: a JetStream domain name", 1),
    (one(domains='[""]'), "domains: a JetStream domain name", 1),
    (one(domains=f'["{"x" * 65}"]'), "domains: a JetStream domain name", 1),
    (one(domains="[7]"), "domains: a JetStream domain name", 1),
    (one(domains='["leaf1", "leaf1"]'), "named twice", 1),
    (one(domains=str([f"l{i}" for i in range(65)]).replace("'", '"')), "at most 64", 1),
])
def test_a_wrong_file_is_refused_with_its_line(text, reason, line):
    with pytest.raises(SystemsError) as refused:
        load_systems(text)
    assert reason in refused.value.reason
    assert refused.value.line == line


def test_a_system_names_its_leaf_domains_and_each_account_of_it_captures_them_too():
    [system, account] = each_account(load_systems(one(domains='["edge-1", "edge_2"]')
                                                  + '[[system.account]]\nname = "B"\ntoken = "t"\n'))
    assert system.domains == account.domains == ("edge-1", "edge_2")


def test_more_systems_than_a_console_holds_are_refused():
    text = "".join(f'[[system]]\nname = "s{i}"\nservers = ["nats://h{i}:4222"]\n' for i in range(1000))
    with pytest.raises(SystemsError, match=f"1000 systems: at most {MAX_SYSTEMS}"):
        load_systems(text)


@pytest.mark.parametrize("key", ["password", "token", "system_password"])
def test_no_refusal_repeats_a_secret(key):
    secret = "hunter2-SECRET"
    for value in (f'"{secret}\\u0000"', f'["{secret}"]', f'"{secret}' + "x" * 1100 + '"'):
        text = one(**{key: value, **({"user": '"u"'} if key == "password" else {}),
                      **({"system_user": '"s"'} if key == "system_password" else {})})
        with pytest.raises(SystemsError) as refused:
            load_systems(text)
        assert secret not in str(refused.value)


@settings(deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_systems_or_one_refusal(text):
    try:
        load_systems(text)
    except SystemsError:
        pass
