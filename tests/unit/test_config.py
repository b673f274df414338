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
