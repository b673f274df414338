import pytest

from console.broker.connection import connect_options
from console.config import ConnectionSettings
from console.errors import ConfigError


def test_secrets_never_appear_in_repr_or_description():
    settings = ConnectionSettings(
        servers=("nats://alice:hunter2@10.0.0.1:4222",), token="s3cret-token", user="alice", password="hunter2"
    )
    shown = repr(settings) + settings.describe()
    assert "s3cret-token" not in shown
    assert "hunter2" not in settings.describe()
    assert "token" in settings.describe() and "user/password" in settings.describe()


def test_settings_from_env_split_servers():
    settings = ConnectionSettings.from_env({"BATCH_CONSOLE_SERVER": "nats://a:4222, nats://b:4222", "BATCH_CONSOLE_TOKEN": "t"})
    assert settings.servers == ("nats://a:4222", "nats://b:4222") and settings.token == "t"


def test_connect_options_carry_each_credential(tmp_path):
    creds = tmp_path / "user.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    options = connect_options(ConnectionSettings(creds_file=str(creds), token="t", user="u", password="p"))
    assert options["user_credentials"] == str(creds)
    assert (options["token"], options["user"], options["password"]) == ("t", "u", "p")


def test_missing_credential_files_are_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="creds file"):
        connect_options(ConnectionSettings(creds_file=str(tmp_path / "absent.creds")))
    with pytest.raises(ConfigError, match="both --tls-cert and --tls-key"):
        connect_options(ConnectionSettings(tls_cert=str(tmp_path / "c.pem")))


def test_credentials_in_a_server_url_become_flags_and_leave_the_url():
    from console.cli import build_parser, forwarded_connection, lift_url_secrets

    args = build_parser().parse_args(["up", "--server", "nats://bob:s3cret@h1:4222,nats://bob:s3cret@h2:4222"])
    lift_url_secrets(args)
    argv, env = forwarded_connection(args)
    assert args.server == "nats://h1:4222,nats://h2:4222"
    assert "s3cret" not in " ".join(argv) and env == {"BATCH_CONSOLE_PASSWORD": "s3cret"}
    token = build_parser().parse_args(["collect", "--server", "nats://tok123@h1:4222"])
    lift_url_secrets(token)
    assert (token.server, token.token) == ("nats://h1:4222", "tok123")


def test_the_event_key_is_made_once_for_a_data_directory_and_readable_by_its_owner_only(tmp_path):
    import stat

    from console.config import EVENT_KEY_ENV, event_key

    key = event_key(data_dir=tmp_path, environ={})
    assert event_key(data_dir=tmp_path, environ={}) == key and len(key) == 64
    assert stat.S_IMODE((tmp_path / "event.key").stat().st_mode) == 0o600
    assert event_key(data_dir=tmp_path, environ={EVENT_KEY_ENV: "k" * 20}) == b"k" * 20
    with pytest.raises(ConfigError, match="shorter"):
        event_key(data_dir=tmp_path, environ={EVENT_KEY_ENV: "short"})
    with pytest.raises(ConfigError, match="cannot read"):
        event_key(tmp_path / "absent.key", environ={})

