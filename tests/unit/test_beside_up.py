"""A command run beside `up` reads as up does: up's URLs, and the data settings up was given (a search beside
`up --decoders FILE` answered every payload predicate "not evaluable"), each unless the command gives its own;
whatever else up.json holds (anyone who may write the data directory may write it) is left out."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from console.config import UP_FILE, DataSettings, Settings, beside_up, data_settings_of


def up_json(where: Path, **fields) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / UP_FILE).write_text(json.dumps({"pid": os.getpid(), "nats": "nats://127.0.0.1:4999", **fields}))


def test_a_command_beside_up_takes_its_decoders_masking_and_objectives(tmp_path):
    up = Settings(data=DataSettings(data_dir=tmp_path, decoders=Path("decoders.toml"), mask_rules=tmp_path / "m.toml",
                                    objectives=tmp_path / "o.toml", no_payloads=True))
    written = data_settings_of(up)
    assert written["decoders"] == str(Path("decoders.toml").resolve()) and written["no_payloads"] is True
    up_json(tmp_path, data=written)
    beside = beside_up(Settings(data=DataSettings(data_dir=tmp_path)))
    assert beside.data.decoders == Path("decoders.toml").resolve() and beside.data.mask_rules == tmp_path / "m.toml"
    assert beside.data.objectives == tmp_path / "o.toml" and beside.data.no_payloads is True
    assert beside.connection.servers == ("nats://127.0.0.1:4999",)


def test_a_setting_the_command_gives_wins_over_ups(tmp_path):
    up_json(tmp_path, data={"decoders": "/up/decoders.toml"})
    own = replace(Settings(data=DataSettings(data_dir=tmp_path, decoders=Path("mine.toml"))),
                  given=frozenset({"data.decoders"}))
    assert beside_up(own).data.decoders == Path("mine.toml")


@pytest.mark.parametrize("data", [{"decoders": 5}, {"decoders": ""}, {"decoders": "x" * 5000}, {"decoders": "a\x00b"},
                                  {"no_payloads": "yes"}, {"mask_rules": ["a"]}, "not a map", None,
                                  {"roles": "/evil.toml", "data_dir": "/"}])
def test_what_up_json_holds_that_is_no_data_setting_is_left_out(tmp_path, data):
    up_json(tmp_path, data=data)
    beside = beside_up(Settings(data=DataSettings(data_dir=tmp_path)))
    assert beside.data == DataSettings(data_dir=tmp_path)
