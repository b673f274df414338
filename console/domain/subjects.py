"""NATS subjects as filters match them (the decoders' rules, maintenance holds)."""

from __future__ import annotations


def subject_matches(pattern: str, subject: str) -> bool:
    """A NATS subject filter: `*` one token, `>` the rest (one token at least)."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)
