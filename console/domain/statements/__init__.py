"""The conformance statements, each one class (its ADR text and its grading hooks), in the order the
report shows them: fast-ingest, then atomic. A new statement is one subclass of Statement in fast.py
or atomic.py, and a faulty publisher in tests/integration/test_conformance.py that fails it (a test
fails for a statement no faulty publisher fails)."""

from __future__ import annotations

from console.domain.statements import atomic, fast
from console.domain.statements.base import ATOMIC, BOTH, DEFINED, FAST, Statement

DEFINING = (fast, atomic)  # importing a module defines its statement classes, which registers them
ORDER = {FAST: 0, ATOMIC: 1, BOTH: 2}
STATEMENTS: dict[str, Statement] = {cls.id: cls() for cls in sorted(DEFINED, key=lambda c: (ORDER[c.kind], c.id))}


def hooked(hook: str) -> tuple[Statement, ...]:
    """The statements that override `hook`: the grader calls only these."""
    return tuple(s for s in STATEMENTS.values() if getattr(type(s), hook) is not getattr(Statement, hook))
