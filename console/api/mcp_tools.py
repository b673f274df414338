"""MCP's tools made from the API's OpenAPI document, never written again by hand: an allow-list of
operations (by operationId, the route's function name), each a tool of that name whose parameters are
the operation's path and query parameters and its JSON body's fields, typed and bounded as the document
says, whose description is the operation's, and whose call is the API's own. A new API read becomes a
tool by adding its id here. The document is read totally (`batch-console mcp` reads it from the console
it is pointed at): an operation it lacks, or one with a parameter of a kind not read here, is no tool
and is said, never an error of the others."""

from __future__ import annotations

import inspect
import keyword
from dataclasses import dataclass
from typing import Annotated, Any, Awaitable, Callable, Literal, Optional
from urllib.parse import quote

from pydantic import Field

READS = ("losses", "incident", "incident_report", "checks", "budgets", "canary", "streams", "systems", "conformance",
         "history", "maintenance_plan", "maintenance_job", "consumers_lag", "loss_manifests")
WRITES = ("edit_stream", "mute_rule", "unmute_rule", "drain_node_job", "restart_node_job")
METHODS = ("get", "post", "put", "patch", "delete")
MAX_DESCRIPTION = 1000
MAX_ENUM = 64
PLAIN = {"string": str, "integer": int, "number": float, "boolean": bool}
BOUNDS = {"minimum": "ge", "maximum": "le", "exclusiveMinimum": "gt", "exclusiveMaximum": "lt", "maxLength": "max_length",
          "minLength": "min_length"}
REQUIRED = inspect.Parameter.empty


class NotAToolOperation(ValueError):
    """An operation of the document that cannot be made a tool (said, and left out)."""


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # path | query | body
    annotation: Any
    default: Any = REQUIRED


@dataclass(frozen=True)
class Operation:
    tool: str
    method: str  # GET, PATCH, ...
    path: str  # under /api/v1: "/incidents/{batch_id}"
    description: str
    params: tuple[Param, ...]
    body: bool  # the body's fields are sent as one JSON object

    def signature(self) -> inspect.Signature:
        return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default,
                                                    annotation=p.annotation) for p in self.params],
                                 return_annotation=str)


def operations(document: Any, wanted: tuple[str, ...], prefix: str = "/api/v1") -> tuple[list[Operation], list[str]]:
    """The wanted operations of an OpenAPI document, in the order wanted, and why each missing one is not a tool."""
    found: dict[str, Operation] = {}
    whys: list[str] = []
    paths = document.get("paths") if isinstance(document, dict) else None
    for path, ops in (paths.items() if isinstance(paths, dict) else ()):
        for method, op in (ops.items() if isinstance(ops, dict) else ()):
            name = op.get("operationId") if isinstance(op, dict) else None
            if method not in METHODS or name not in wanted or name in found or not isinstance(path, str):
                continue
            try:
                found[name] = _operation(document, name, method, path.removeprefix(prefix), op)
            except (NotAToolOperation, TypeError, ValueError, RecursionError) as e:
                whys.append(f"{name}: {str(e)[:200]}")
    whys += [f"{name}: not in the console's API document" for name in wanted
             if name not in found and not any(w.startswith(f"{name}:") for w in whys)]
    return [found[name] for name in wanted if name in found], whys


def tool_function(op: Operation, call: Callable[..., Awaitable[tuple[int, str]]]) -> Callable[..., Awaitable[str]]:
    """The tool: its parameters the operation's, its answer the API's text (a refusal's problem as text).
    `call(method, path, body, **query)` is the API's, with the caller's token."""

    async def tool(**given: Any) -> str:
        path, query, body = op.path, dict[str, Any](), dict[str, Any]()
        for p in op.params:
            value = given.get(p.name)
            if p.where == "path":
                path = path.replace("{" + p.name + "}", path_segment(str(value)))
            elif value is not None:
                (query if p.where == "query" else body)[p.name] = value
        status, text = await call(op.method, path, body if op.body else None, **query)
        return text if text else f"done ({status})"

    tool.__name__, tool.__doc__ = op.tool, op.description
    tool.__signature__ = op.signature()  # type: ignore[attr-defined]  # what MCP reads the tool's parameters from
    return tool


def _operation(document: dict[str, Any], name: str, method: str, path: str, op: dict[str, Any]) -> Operation:
    if not _name(name) or not path.startswith("/") or not path.isprintable() or len(path) > 200:
        raise NotAToolOperation("not a tool's name or path")
    text = op.get("description") or op.get("summary") or name
    description = text[:MAX_DESCRIPTION] if isinstance(text, str) else name
    params = []
    for given in op.get("parameters") or []:
        if not isinstance(given, dict) or given.get("in") not in ("path", "query"):
            raise NotAToolOperation("a parameter that is neither in the path nor in the query")
        where, required = given["in"], given.get("required") is True or given["in"] == "path"
        params.append(_param(document, given.get("name"), where, given.get("schema"), required))
    body = op.get("requestBody")
    if body is not None:
        schema = _resolved(document, ((body.get("content") or {}).get("application/json") or {}).get("schema"))
        fields, needed = schema.get("properties"), schema.get("required") or []
        if schema.get("type") != "object" or not isinstance(fields, dict):
            raise NotAToolOperation("a body that is not a JSON object of fields")
        params += [_param(document, field, "body", each, field in needed) for field, each in fields.items()]
    if len({p.name for p in params}) != len(params) or any(p.where == "path" and "{" + p.name + "}" not in path
                                                          for p in params):
        raise NotAToolOperation("parameters named twice, or a path parameter the path lacks")
    return Operation(name, method.upper(), path, description, tuple(params), body is not None)


def _param(document: dict[str, Any], name: Any, where: str, schema: Any, required: bool) -> Param:
    if not _name(name):
        raise NotAToolOperation(f"a parameter name a tool cannot take: {str(name)[:64]!r}")
    schema = _resolved(document, schema)
    default = schema.get("default", REQUIRED if required else None)
    return Param(name, where, _annotation(document, schema), default)


def _annotation(document: dict[str, Any], schema: dict[str, Any]) -> Any:
    """A Python type of a parameter's schema: a plain type (bounded), a Literal of an enum, either or null."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kinds = [_resolved(document, o) for o in options]
        if len(kinds) != 2 or {"type": "null"} not in kinds:
            raise NotAToolOperation("a parameter of several kinds")
        return Optional[_annotation(document, next(k for k in kinds if k != {"type": "null"}))]  # noqa: UP045
    enum = schema.get("enum")
    if isinstance(enum, list):
        if not 0 < len(enum) <= MAX_ENUM or not all(isinstance(v, str) and v.isprintable() for v in enum):
            raise NotAToolOperation("an enum that is not of names")
        return Literal[tuple(enum)]
    kind = PLAIN.get(str(schema.get("type")))
    if kind is None:
        raise NotAToolOperation(f"a parameter of type {str(schema.get('type'))[:32]}")
    bounds = {BOUNDS[k]: v for k, v in schema.items() if k in BOUNDS and type(v) in (int, float) and abs(v) < 2 ** 53}
    return Annotated[kind, Field(**bounds)] if bounds else kind


def _resolved(document: dict[str, Any], schema: Any, depth: int = 0) -> dict[str, Any]:
    """A schema, its `$ref` into the document's components followed (a few times at most)."""
    if not isinstance(schema, dict):
        raise NotAToolOperation("a schema that is not an object")
    ref = schema.get("$ref")
    if ref is None:
        return schema
    if depth > 3 or not isinstance(ref, str) or not ref.startswith("#/components/schemas/"):
        raise NotAToolOperation("a reference outside the document's schemas")
    found = ((document.get("components") or {}).get("schemas") or {}).get(ref.rsplit("/", 1)[1])
    return _resolved(document, found, depth + 1)


def _name(name: Any) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= 64 and name.isascii() and name.isidentifier()
            and not keyword.iskeyword(name) and not name.startswith("_"))


def path_segment(text: str) -> str:
    """A path segment: the API refuses a bad name; nothing here may reach another path ("..": %2E%2E)."""
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if set(text) <= {"."} else quoted
