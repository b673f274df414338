"""How much a property test tries and how often a long repetition runs: a little in the test command, much
more in a soak run before a release (`BATCH_CONSOLE_SOAK=1 bash scripts/test.sh`). A soak run keeps every
test of the test command and adds the long repetitions, marked `soak`, beside their shorter twins."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

SOAK = os.environ.get("BATCH_CONSOLE_SOAK", "") == "1"

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("soak", max_examples=600, deadline=None)
settings.load_profile("soak" if SOAK else "ci")


def examples(times: int = 1) -> int:
    """A property test's count: `times` the profile's (a cheap property can take ten times more)."""
    return int(settings.default.max_examples * times)


def repeats(ci: int, soak: int) -> list:
    """A parameter of how many times a repetition runs: `ci` in the test command, `soak` before a release."""
    return [ci, pytest.param(soak, marks=pytest.mark.soak)]
