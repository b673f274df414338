"""Searching a stream: the query (hostile input from a URL, a form, a command line), the predicate in
the Common Expression Language, and the limits that stop a search and say which one did.

CEL, not Python: an expression reaches only what it is given (the message's subject, sequence, time,
headers, text and JSON payload), has no loops but comprehensions over what it is given, and no I/O.
The implementation is `common-expression-language` (Rust, through PyO3; ~6 us an evaluation here)
rather than `cel-python` (pure Python, 10-50x slower): the search is read-bound and must keep up with
an ordered consumer. Its parser refuses deep nesting, and nested comprehensions (the one way to make
one evaluation take quadratic time and more over a payload's lists) are refused here before it sees them.

`matches` is the console's own, on RE2 (google-re2, the engine CEL's specification names): the library's
compiles its pattern again on every call (45 ms for `\\w{200}`, per message and per call), so a few
calls over large payloads stalled a search for seconds a message. Here each pattern is compiled once a
search, and a literal one that does not compile refuses the search. What one message may cost is
bounded before the search starts (pattern calls, multiplied by the literal or computed list a
comprehension runs them over); the time limit itself is kept by the process that evaluates
(console/predicate_worker.py), which is stopped hard when an evaluation outlasts it.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from console.domain.wire import INT64_MAX, MalformedInput, has_control, stream_name_problem

MAX_EXPRESSION = 1000  # characters
VARIABLES = ("subject", "seq", "time", "headers", "size", "text", "payload")  # see message_context
FUNCTIONS = frozenset({"contains", "startsWith", "endsWith", "matches", "size", "has", "int", "uint", "double",
                       "string", "bool", "bytes", "type", "timestamp", "duration", "dyn", *("all", "exists",
                       "exists_one", "map", "filter"), "lowerAscii", "upperAscii", "trim", "split", "join",
                       "indexOf", "lastIndexOf", "substring", "replace", "getFullYear", "getMonth",
                       "getDayOfMonth", "getHours", "getMinutes", "getSeconds", "max", "min"})
MAX_SUBJECT = 256
MAX_KEPT = 100_000  # matches a search keeps in memory (newest first, a page); an export hands them on instead
MACROS = ("all", "exists", "exists_one", "map", "filter")
_MACRO = re.compile(r"\.(" + "|".join(MACROS) + r")\s*\(")
_MATCHES = re.compile(r"(?<![\w.])matches\s*\(|\.matches\s*\(")
_LITERAL = re.compile(r"""\s*((?:r|R)?"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')""")
_BOUND = re.compile(r"\s*([A-Za-z_]\w*)\s*,")
OWN_MATCHES = "re2_matches"  # `x.matches(p)` is evaluated as `x.re2_matches(p)`: the console's, compiled once
MAX_LITERAL = 64  # elements of a list or map literal
MAX_PATTERN_CALLS = 32  # pattern evaluations one message may cost: calls, each times the list it runs over
MAX_PATTERNS = 64  # patterns one search compiles (a pattern made from the message makes one per value)
MAX_PATTERN = 1000  # characters of a pattern
PATTERN_MEMORY = 8 << 20  # bytes RE2 may use for one compiled pattern
NEWEST, OLDEST = "newest", "oldest"
LIMITS = {"max_scanned": (1, 10**9, 1_000_000), "max_bytes": (1, 2**40, 1 << 30), "max_matches": (1, 10**9, 1000),
          "max_seconds": (0.1, 3600.0, 60.0)}


class SearchRefused(MalformedInput):
    what = "search"


def search_time(text: str | None) -> datetime | None:
    """A time as a form or a command line gives it (ISO 8601, 'Z' for UTC), None for none; SearchRefused else."""
    if not text or not text.strip():
        return None
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SearchRefused(f"not a time (ISO 8601): {text.strip()[:40]!r}") from None


@dataclass(frozen=True)
class SearchQuery:
    stream: str
    subject: str = ""  # a filter subject (wildcards allowed): the server filters
    start_seq: int | None = None
    end_seq: int | None = None
    since: datetime | None = None  # the server starts there (its deliver policy by start time)
    until: datetime | None = None
    where: str = ""  # a CEL expression; empty: every message
    direction: str = OLDEST
    max_scanned: int = 1_000_000
    max_bytes: int = 1 << 30
    max_matches: int = 1000
    max_seconds: float = 60.0

    def __post_init__(self) -> None:
        """Total: SearchRefused names what is wrong (a name, a filter, a window, a limit, the expression)."""
        if (problem := stream_name_problem(self.stream)) is not None:
            raise SearchRefused(f"stream: {problem}")
        if len(self.subject) > MAX_SUBJECT or has_control(self.subject) or " " in self.subject or \
                (self.subject and ("" in self.subject.split(".") or ">" in self.subject.split(".")[:-1])):
            raise SearchRefused("subject: not a subject filter (tokens split by '.', '*' and a last '>')")
        for name in ("start_seq", "end_seq"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 1 <= value <= INT64_MAX):
                raise SearchRefused(f"{name}: not a sequence from 1")
        if self.start_seq and self.end_seq and self.start_seq > self.end_seq:
            raise SearchRefused("start_seq is after end_seq")
        if self.since and self.until and self.since > self.until:
            raise SearchRefused("since is after until")
        for t in (self.since, self.until):
            if t is not None and t.tzinfo is None:
                raise SearchRefused("a time without a time zone")
        if self.direction not in (NEWEST, OLDEST):
            raise SearchRefused(f"direction: {NEWEST} or {OLDEST}")
        for name, (low, high, _) in LIMITS.items():
            value = getattr(self, name)
            if type(value) not in (int, float) or not low <= value <= high:
                raise SearchRefused(f"{name}: from {low} to {high}")
        if self.direction == NEWEST and self.max_matches > MAX_KEPT:
            raise SearchRefused(f"max_matches: newest first keeps its matches to order them, at most {MAX_KEPT:,}")
        Predicate(self.where)  # compiles, or says why not

    def describe(self) -> dict[str, Any]:
        """The query as the audit trail and an export's header keep it."""
        out: dict[str, Any] = {"stream": self.stream}
        for name in ("subject", "start_seq", "end_seq", "since", "until", "where", "direction", *LIMITS):
            value = getattr(self, name)
            if value not in (None, ""):
                out[name] = value.isoformat() if isinstance(value, datetime) else value
        return out


class Predicate:
    """A compiled CEL expression over one message; an empty one matches every message."""

    def __init__(self, text: str):
        if len(text) > MAX_EXPRESSION or has_control(text.replace("\n", " ").replace("\t", " ")):
            raise SearchRefused(f"where: at most {MAX_EXPRESSION} printable characters")
        shape = _shape(text)
        if shape.cost > MAX_PATTERN_CALLS:
            raise SearchRefused(f"where: up to {shape.cost} pattern evaluations a message (each matches() call, times "
                                f"the list a comprehension runs it over; a computed list counts as {MAX_LITERAL}); "
                                f"at most {MAX_PATTERN_CALLS}")
        self.text = text.strip()
        self._bound = shape.bound
        self.patterns = Patterns()
        for pattern in shape.patterns:
            try:
                self.patterns.compiled(pattern)
            except PredicateError as e:
                raise SearchRefused(f"where: {e}") from None
        import cel  # here, not at the top: its package loads a CLI (prompt_toolkit, rich) that costs every
        # process of the console 0.15 s at start, and most never compile a predicate
        try:
            self._program = cel.compile(shape.rewritten.strip()) if self.text else None
        except Exception as e:  # the parser's own words, cut
            raise SearchRefused(f"where: {str(e).splitlines()[0][:300]}") from None
        self._context = cel.Context()
        self._context.add_function(OWN_MATCHES, self.patterns.search)
        self._context.add_function("matches", self.patterns.search)  # the global form, matches(text, p)
        if self._program is not None:
            unknown = sorted({f for f in self._program.functions()
                              if f.isidentifier() and f not in FUNCTIONS and f != OWN_MATCHES}  # not operators
                             | {v for v in self._program.variables() if v not in VARIABLES and v not in shape.bound})
            if unknown:
                raise SearchRefused(f"where: {', '.join(unknown)[:200]} not known (a message has "
                                    f"{', '.join(VARIABLES)}; CEL's own functions only)")

    @property
    def payload_paths(self) -> tuple[tuple[str, ...], ...] | None:
        """The payload's fields the expression reads (`payload.a.b`: ("a", "b"), and all below), or None
        when it reads the payload some other way (indexed, whole, shadowed): a decoder builds no more."""
        return _payload_paths(self.text, self._bound)

    @property
    def needs(self) -> frozenset[str]:
        """The message's parts the expression reads: only those are made for each message."""
        return frozenset(self._program.variables()) if self._program is not None else frozenset()

    def matches(self, message: Mapping[str, Any]) -> bool:
        """True or False; an evaluation error (a missing field, a wrong type) raises PredicateError."""
        if self._program is None:
            return True
        try:
            self._context.update(dict(message))
            result = self._program.execute(self._context)
        except Exception as e:
            raise PredicateError(f"{type(e).__name__}: {str(e)[:200]}") from None
        return result is True


class PredicateError(Exception):
    """The expression could not be evaluated on one message: counted, and the message does not match."""


class Patterns:
    """The patterns one search uses, each compiled once (RE2: linear time, its memory bounded)."""

    def __init__(self) -> None:
        self._compiled: dict[str, Any] = {}
        self._options = re2.Options()
        self._options.max_mem = PATTERN_MEMORY
        self._options.log_errors = False

    def compiled(self, pattern: str) -> Any:
        found = self._compiled.get(pattern)
        if found is None:
            if len(pattern) > MAX_PATTERN:
                raise PredicateError(f"a pattern of over {MAX_PATTERN} characters")
            if len(self._compiled) >= MAX_PATTERNS:
                raise PredicateError(f"over {MAX_PATTERNS} different patterns in one search")
            try:
                found = self._compiled[pattern] = re2.compile(pattern, self._options)
            except re2.error as e:
                why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
                raise PredicateError(f"not a pattern (RE2): {pattern[:60]!r}: {why[:120]}") from None
        return found

    def search(self, text: object, pattern: object) -> bool:
        if not isinstance(text, str) or not isinstance(pattern, str):
            raise PredicateError("matches() takes a string and a pattern string")
        return self.compiled(pattern).search(text) is not None


@dataclass(frozen=True)
class Shape:
    rewritten: str  # the expression with `.matches(` as the console's own
    cost: int  # pattern evaluations one message may cost at most
    patterns: tuple[str, ...]  # the literal patterns, compiled before the search
    bound: frozenset[str] = frozenset()  # the comprehensions' own variables


def _shape(text: str) -> Shape:
    """Read outside string literals: refuses a comprehension inside another and a literal of over
    MAX_LITERAL elements; weighs each matches() call by the list the comprehension around it runs over
    (a literal's size, MAX_LITERAL for a computed one, 1 for a part of the message, bounded by its size)."""
    out: list[str] = []
    open_macros: list[tuple[int, int]] = []  # (paren depth its arguments start at, its list's size)
    literals: list[list[int]] = []  # open [ or {: [position, elements so far]
    closed: dict[int, int] = {}  # position of a literal's closing ] or } -> its elements
    cost, patterns, bound = 0, [], set()
    depth, i, quote = 0, 0, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if open_macros and depth < open_macros[-1][0]:
                open_macros.pop()
        elif c in "[{":
            literals.append([i, 0 if text[i + 1:].lstrip()[:1] in "]}" else 1])
        elif c == "," and literals:
            literals[-1][1] += 1
        elif c in "]}" and literals:
            _, size = literals.pop()
            if size > MAX_LITERAL:
                raise SearchRefused(f"where: a list or map of over {MAX_LITERAL} elements")
            closed[i] = size
        elif c == "." and (m := _MACRO.match(text, i)):
            if open_macros:
                raise SearchRefused("where: a comprehension inside another (all, exists, exists_one, map, filter) "
                                    "can take as long as a payload's lists multiplied; write one at a time")
            before = text[:i].rstrip()
            size = closed.get(len(before) - 1, MAX_LITERAL) if before[-1:] in "]})" else 1
            open_macros.append((depth + 1, size))
            if name := _BOUND.match(text, m.end()):
                bound.add(name.group(1))
            out.append(text[i:m.end() - 1])
            i = m.end() - 1
            continue
        elif (m := _MATCHES.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
                                                 or c == "."):
            cost += open_macros[-1][1] if open_macros else 1
            if (literal := _LITERAL.match(text, m.end())) and (c == "." or text[literal.end():].lstrip()[:1] != ","):
                patterns.append(_unquote(literal.group(1)))
            out.append(f".{OWN_MATCHES}(" if c == "." else "matches(")
            i = m.end()
            continue
        out.append(c)
        i += 1
    return Shape("".join(out), cost, tuple(p for p in patterns if p is not None), frozenset(bound))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_PAYLOAD = re.compile(r"(?<![\w.])payload\b")
_STEP = re.compile(r"\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)(\s*\()?")


def _payload_paths(text: str, bound: frozenset[str]) -> tuple[tuple[str, ...], ...] | None:
    if "payload" in bound:
        return None
    code = _STRING.sub('""', text)
    paths = []
    for found in _PAYLOAD.finditer(code):
        path, at = [], found.end()
        while (step := _STEP.match(code, at)) and not step.group(2):  # a field, not a method or macro
            path.append(step.group(1))
            at = step.end()
        if not path:
            return None
        paths.append(tuple(path))
    return tuple(sorted(set(paths), key=len))


def _unquote(literal: str) -> str | None:
    """A CEL string literal's value, where Python reads it the same (else None: compiled when first used)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an escape Python does not know (CEL then refuses it itself)
            value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def message_context(subject: str, seq: int, time: datetime, headers: Mapping[str, str] | None,
                    data: bytes, needs: frozenset[str] | None = None,
                    decode: Callable[[bytes], Any] | None = None) -> dict[str, Any]:
    """What an expression sees of a message: `subject`, `seq`, `time` (ISO text), `headers` (a map of
    strings), `size`, `text` (the payload as UTF-8, invalid bytes replaced) and `payload` (the message
    as its stream's decoder reads it, `decode`; without one, the JSON document when the payload is one,
    else null); only the parts in `needs`, when given. A decoder's error is the caller's to count."""
    out: dict[str, Any] = {}
    if decode is not None and (needs is None or "payload" in needs):
        out["payload"] = decode(data)
    elif needs is None or "payload" in needs:
        payload: Any = None
        if data.lstrip()[:1] in (b"{", b"["):
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):
                payload = None
        out["payload"] = payload
    if needs is None or "text" in needs:
        out["text"] = data.decode("utf-8", "replace")
    if needs is None or "headers" in needs:
        out["headers"] = dict(headers or {})
    if needs is None or "time" in needs:
        out["time"] = time.astimezone(timezone.utc).isoformat()
    for name, value in (("subject", subject), ("seq", seq), ("size", len(data))):
        if needs is None or name in needs:
            out[name] = value
    return out


@dataclass(frozen=True)
class Found:
    """A message that matched: where it is, and what it holds (the headers in their order)."""

    seq: int
    subject: str
    time: datetime
    headers: tuple[tuple[str, str], ...]
    data: bytes

    @property
    def batch_id(self) -> str | None:
        """The atomic batch it belongs to (its Nats-Batch-Id header), when it is one's."""
        return next((v for k, v in self.headers if k == "Nats-Batch-Id"), None)


@dataclass
class SearchProgress:
    scanned: int = 0
    matched: int = 0
    bytes: int = 0
    errors: int = 0  # messages the expression could not be evaluated on
    elapsed: float = 0.0
    reached: int | None = None  # the last stream sequence read
    stopped_by: str | None = None  # "max_scanned", "max_bytes", "max_matches", "max_seconds", "cancelled", "end"
    error_sample: list[str] = field(default_factory=list)

    def line(self) -> str:
        state = {None: "searching", "end": "done: the whole range read", "cancelled": "cancelled"}.get(
            self.stopped_by, f"stopped at the limit {self.stopped_by}")
        return (f"{state}: {self.scanned:,} scanned, {self.matched:,} matched, {self.bytes:,} bytes, "
                f"{self.elapsed:.1f}s" + (f", at seq {self.reached}" if self.reached is not None else "")
                + (f", {self.errors:,} not evaluable" if self.errors else ""))

    def limit_hit(self, query: SearchQuery) -> str | None:
        if self.matched >= query.max_matches:
            return "max_matches"
        if self.scanned >= query.max_scanned:
            return "max_scanned"
        if self.bytes >= query.max_bytes:
            return "max_bytes"
        if self.elapsed >= query.max_seconds:
            return "max_seconds"
        return None
