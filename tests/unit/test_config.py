from pathlib import Path

import pytest

from console.broker.connection import connect_options
from console.cli import build_parser
from console.config import ConnectionSettings, child_env, load
from console.errors import ConfigError


def parse(argv: list[str], environ: dict[str, str] | None = None):
    return load(build_parser().parse_args(argv), environ={} if environ is None else environ)


def test_secrets_never_appear_in_repr_or_description():
    settings = ConnectionSettings(
        servers=("nats://alice:hunter2@10.0.0.1:4222",), token="s3cret-token", user="alice", password="hunter2"
    )
    shown = repr(settings) + settings.describe()
    assert "s3cret-token" not in shown
    assert "hunter2" not in settings.describe()
    assert "token" in settings.describe() and "user/password" in settings.describe()


def test_settings_from_env_split_servers():
    settings = load(environ={"BATCH_CONSOLE_SERVER": "nats://a:4222, nats://b:4222", "BATCH_CONSOLE_TOKEN": "t"})
    assert settings.connection.servers == ("nats://a:4222", "nats://b:4222") and settings.connection.token == "t"


def test_connect_options_carry_each_credential(tmp_path):
    creds = tmp_path / "user.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    options = connect_options(ConnectionSettings(creds=str(creds), token="t", user="u", password="p"))
    assert options["user_credentials"] == str(creds)
    assert (options["token"], options["user"], options["password"]) == ("t", "u", "p")


def test_missing_credential_files_are_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="creds file"):
        connect_options(ConnectionSettings(creds=str(tmp_path / "absent.creds")))
    with pytest.raises(ConfigError, match="both --tls-cert and --tls-key"):
        connect_options(ConnectionSettings(tls_cert=str(tmp_path / "c.pem")))


def test_credentials_in_a_server_url_move_to_the_credential_settings_and_leave_the_url():
    settings = parse(["up", "--server", "nats://bob:s3cret@h1:4222,nats://bob:s3cret@h2:4222"])
    assert settings.connection.servers == ("nats://h1:4222", "nats://h2:4222")
    assert (settings.connection.user, settings.connection.password) == ("bob", "s3cret")
    env = child_env(settings)
    assert env["BATCH_CONSOLE_SERVER"] == "nats://h1:4222,nats://h2:4222" and env["BATCH_CONSOLE_PASSWORD"] == "s3cret"
    assert "s3cret" not in repr(settings) + settings.connection.describe()
    token = parse(["collect", "--server", "nats://tok123@h1:4222"]).connection
    assert (token.servers, token.token) == (("nats://h1:4222",), "tok123")


def test_the_event_key_is_made_once_for_a_data_directory_and_readable_by_its_owner_only(tmp_path):
    import stat

    from console.config import EVENT_KEY_ENV, event_key

    key = event_key(data_dir=tmp_path, environ={})
    assert event_key(data_dir=tmp_path, environ={}) == key and len(key) == 64
    assert stat.S_IMODE((tmp_path / "event.key").stat().st_mode) == 0o600
    assert event_key(data_dir=tmp_path, environ={EVENT_KEY_ENV: "key-from-the-env"}) == b"key-from-the-env"
    with pytest.raises(ConfigError, match="shorter"):
        event_key(data_dir=tmp_path, environ={EVENT_KEY_ENV: "short"})
    with pytest.raises(ConfigError, match="cannot read"):
        event_key(tmp_path / "absent.key", environ={})


@pytest.mark.parametrize("mode, problem", [(0o644, "readable by others"), (0o640, "readable by others"),
                                           (0o602, "writable by others"), (0o666, "writable by others")])
def test_an_event_key_file_others_may_read_or_write_is_refused_with_the_fix(tmp_path, mode, problem):
    from console.config import event_key

    path = tmp_path / "event.key"
    path.write_text("0123456789abcdef0123456789abcdef\n")
    path.chmod(mode)
    for given in ({"key_file": path}, {"data_dir": tmp_path}):
        with pytest.raises(ConfigError, match=f"{problem}: chmod 600 {path}$"):
            event_key(**given, environ={})
    path.chmod(0o600)
    assert event_key(path, environ={}) == b"0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("plain", ["a" * 16, "ab" * 20, "abcab" * 8])
def test_an_event_key_too_plain_to_be_secret_is_refused(tmp_path, plain):
    from console.config import EVENT_KEY_ENV, event_key

    with pytest.raises(ConfigError, match="too plain"):
        event_key(data_dir=tmp_path, environ={EVENT_KEY_ENV: plain})


def test_the_data_directory_and_logs_are_made_for_their_owner_alone(tmp_path):
    import stat

    from console.config import event_key, private_dir, private_file

    event_key(data_dir=tmp_path / "made" / "data", environ={})
    for made in (tmp_path / "made", tmp_path / "made" / "data"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
    old = tmp_path / "old.log"
    old.write_text("a line\n")
    old.chmod(0o644)
    assert stat.S_IMODE(private_file(old).stat().st_mode) == 0o600 and old.read_text() == "a line\n"
    assert stat.S_IMODE(private_file(private_dir(tmp_path / "logs") / "new.log").stat().st_mode) == 0o600



def test_every_setting_has_its_own_environment_twin_named_after_its_flag():
    from console.config import SECTIONS, specs

    twins = [spec.env for section in SECTIONS.values() for _, spec in specs(section)]
    assert len(twins) == len(set(twins))
    assert {"BATCH_CONSOLE_SERVER", "BATCH_CONSOLE_CREDS", "BATCH_CONSOLE_TLS_CA", "BATCH_CONSOLE_SYSTEM_CREDS",
            "BATCH_CONSOLE_MONITOR_URL", "BATCH_CONSOLE_EVENT_KEY", "BATCH_CONSOLE_PORT"} <= set(twins)


def test_a_flag_wins_over_its_environment_twin_which_wins_over_the_commands_default():
    assert parse(["collect"]).collector.cpu == "adaptive"  # collect's own default
    assert parse(["collect"], {"BATCH_CONSOLE_CPU": "low"}).collector.cpu == "low"
    assert parse(["collect", "--cpu", "normal"], {"BATCH_CONSOLE_CPU": "low"}).collector.cpu == "normal"
    both = parse(["collect", "--inbox-prefix", "a,b", "--inbox-prefix", "c"])
    assert both.collector.inbox_prefixes == ("a", "b", "c")
    assert parse(["serve"], {"BATCH_CONSOLE_READ_ONLY": "yes"}).web.read_only is True
    # the old flag names are aliases of the canonical ones, and read the same variable
    assert parse(["server", "--port", "0"]).embedded.nats_port == 0
    assert parse(["server"], {"BATCH_CONSOLE_NATS_PORT": "4333"}).embedded.nats_port == 4333
    assert parse(["analytics", "--every", "5"]).analytics.every == 5.0


def test_a_bad_environment_value_names_its_variable_and_never_shows_a_secret():
    with pytest.raises(ConfigError, match=r"\$BATCH_CONSOLE_PORT='eighty'"):
        load(environ={"BATCH_CONSOLE_PORT": "eighty"})
    with pytest.raises(ConfigError, match=r"\$BATCH_CONSOLE_CPU='max'"):
        load(environ={"BATCH_CONSOLE_CPU": "max"})
    with pytest.raises(ConfigError, match=r"\$BATCH_CONSOLE_INSECURE"):
        load(environ={"BATCH_CONSOLE_INSECURE": "perhaps"})


def test_the_spark_options_carry_every_connection_setting_and_read_back_the_same(tmp_path):
    from console.config import SPARK_EVENT_KEY, SPARK_KEY_SOURCE, event_key, spark_options

    event_key(data_dir=tmp_path, environ={})  # the collector's, as the job finds it
    settings = load(environ={"BATCH_CONSOLE_SERVER": "nats://a:1,nats://b:2", "BATCH_CONSOLE_CREDS": "/c.creds",
                             "BATCH_CONSOLE_TOKEN": "t0k", "BATCH_CONSOLE_TLS_CA": "/ca.pem",
                             "BATCH_CONSOLE_CONNECT_TIMEOUT": "7", "BATCH_CONSOLE_DATA_DIR": str(tmp_path)})
    options = spark_options(settings)
    assert ConnectionSettings.from_options(options) == settings.connection
    assert options[SPARK_EVENT_KEY] == (tmp_path / "event.key").read_text().strip()
    assert options[SPARK_KEY_SOURCE] == str((tmp_path / "event.key").resolve())


def test_a_reader_never_makes_an_event_key_and_says_where_it_looked(tmp_path):
    from console.config import EventLogSettings

    with pytest.raises(ConfigError, match="no event key at .*no collector has run on this data directory"):
        EventLogSettings().keyed(tmp_path, make=False)
    assert not (tmp_path / "event.key").exists()
    made = EventLogSettings().keyed(tmp_path, make=True)
    assert made.key and made.key_source == str((tmp_path / "event.key").resolve())
    assert EventLogSettings().keyed(tmp_path, make=False).key == made.key


def test_a_notebook_in_a_folder_below_finds_the_data_directory_above(tmp_path):
    from console.config import event_key, found_data_dir

    event_key(data_dir=tmp_path / "data", environ={})
    (tmp_path / "notebooks").mkdir()
    found = found_data_dir(load(environ={}), start=tmp_path / "notebooks")
    assert found.data.data_dir == tmp_path / "data"
    given = load(environ={"BATCH_CONSOLE_DATA_DIR": "elsewhere"})
    assert found_data_dir(given, start=tmp_path / "notebooks").data.data_dir == Path("elsewhere")  # given wins


def test_up_hands_its_parts_every_setting_in_their_environment_and_nothing_on_their_command_line():
    settings = parse(["up", "--server", "nats://h:4222", "--token", "t0k", "--read-only", "--port", "9000"],
                     {"BATCH_CONSOLE_CREDS": "/c.creds"})
    env = child_env(settings)
    assert env == {"BATCH_CONSOLE_SERVER": "nats://h:4222", "BATCH_CONSOLE_TOKEN": "t0k", "BATCH_CONSOLE_READ_ONLY": "1",
                   "BATCH_CONSOLE_PORT": "9000", "BATCH_CONSOLE_CREDS": "/c.creds",
                   "BATCH_CONSOLE_FOLLOW": "1",  # up's own defaults: analytics follows the log,
                   "BATCH_CONSOLE_DRIVER_MEMORY": "1500m",  # in a heap beside every other part (as --help says),
                   "BATCH_CONSOLE_ANALYTICS_EVERY": "300.0"}  # on a timer for all but losses



def test_a_commands_settings_take_a_running_ups_urls_and_nothing_from_a_file_that_is_not_one(tmp_path):
    """DATA_DIR/up.json is a file any process of the user can write: read strictly, and only while its `up` runs."""
    import json
    import os

    from console.config import UP_FILE, beside_up, load, running_up

    settings = load(environ={"BATCH_CONSOLE_DATA_DIR": str(tmp_path)})
    up = tmp_path / UP_FILE
    for hostile in ("not json", "[1, 2]", '{"pid": "1"}', '{"pid": -1}', '{"pid": 999999999}', "{" * 5000,
                    json.dumps({"pid": os.getpid(), "nats": ["nats://evil"], "monitor": 5})):
        up.write_text(hostile)
        assert beside_up(settings).connection.servers == settings.connection.servers, hostile
    assert running_up(tmp_path) is not None  # the last one: a live pid, with values of the wrong types
    up.write_text(json.dumps({"pid": os.getpid(), "nats": "nats://127.0.0.1:4333", "monitor": "http://127.0.0.1:8333"}))
    chosen = beside_up(settings).connection
    assert (chosen.servers, chosen.monitor_url) == (("nats://127.0.0.1:4333",), "http://127.0.0.1:8333")
    given = load(environ={"BATCH_CONSOLE_DATA_DIR": str(tmp_path), "BATCH_CONSOLE_SERVER": "nats://127.0.0.2:4222"})
    assert beside_up(given).connection.servers == ("nats://127.0.0.2:4222",)  # what is given wins


@pytest.mark.parametrize("value", ["0", "0.5", "3601", "nan", "inf", "-1", "abc", "1e400", "6\x000", " " * 300])
def test_refusals_every_takes_seconds_from_one_to_an_hour_and_nothing_else(value):
    with pytest.raises(SystemExit):
        parse(["serve", "--refusals-every", value], {})
    assert parse(["serve", "--refusals-every", "2"], {}).web.refusals_every == 2.0


@pytest.mark.parametrize("value", ['always"; include /etc/passwd', "2m", "", "ALWAYS", "always\n", "x" * 1000])
def test_the_embedded_servers_sync_policy_is_one_of_two_words_never_text_written_into_its_configuration(value):
    if value:  # an empty variable is an unset one: the default
        with pytest.raises(ConfigError):
            load(environ={"BATCH_CONSOLE_NATS_SYNC": value})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["server", "--nats-sync", value])
    assert load(environ={}).embedded.nats_sync == "always"
    assert load(environ={"BATCH_CONSOLE_NATS_SYNC": "default"}).embedded.nats_sync == "default"


@pytest.mark.parametrize("value", ["a.b", "leaf*", "leaf>", "leaf 1", "leaf\x00", "le\naf", "x" * 65, "$JS"])
def test_a_leaf_domain_is_a_subject_token_and_nothing_else(value):
    with pytest.raises(ConfigError):
        load(environ={"BATCH_CONSOLE_DOMAIN": value})
    with pytest.raises(SystemExit):
        parse(["collect", "--domain", value], {})
    assert parse(["collect", "--domain", "edge-1", "--domain", "edge_2"], {}).collector.domains == ("edge-1", "edge_2")
    assert load(environ={"BATCH_CONSOLE_DOMAIN": "edge-1,edge_2"}).collector.domains == ("edge-1", "edge_2")


def test_up_leaves_out_only_the_parts_it_may_and_refuses_any_other_name(capsys):
    assert parse(["up", "--without", "analytics,alerts", "--without", "canary"]).demo.without == \
        ("analytics", "alerts", "canary")
    assert parse(["up"], {"BATCH_CONSOLE_WITHOUT": " web "}).demo.without == ("web",)
    for hostile in ("collector", "nats", "analytics;rm -rf /", "web\x1b[2J", "a" * 10_000, "ANALYTICS"):
        with pytest.raises(SystemExit):
            parse(["up", "--without", hostile])
        assert "not a part up can leave out" in capsys.readouterr().err
        with pytest.raises(ConfigError, match=r"\$BATCH_CONSOLE_WITHOUT=.*not a part up can leave out"):
            load(environ={"BATCH_CONSOLE_WITHOUT": f"analytics,{hostile}"})
