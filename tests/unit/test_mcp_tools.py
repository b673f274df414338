"""MCP's tools made from the API's OpenAPI document: every allow-listed operation of the console's own
document is a tool with its parameters, bounds and description; a call goes to the API's path with each
path parameter one segment; a hostile document (wrong types, loops, names a tool cannot take, kinds not
read) leaves its operation out with the reason and never stops the others."""

from __future__ import annotations

import asyncio
import copy
import inspect
from pathlib import Path

import pytest

from console.api.app import make_api
from console.api.mcp_tools import READS, WRITES, operations, tool_function
from console.api.tokens import TokenStore
from console.config import load
from console.fleet import Fleet


def test_every_allow_listed_operation_of_the_consoles_document_is_a_tool(document):
    found, whys = operations(document, READS + WRITES)
    assert [op.tool for op in found] == list(READS + WRITES) and whys == []
    ops = {op.tool: op for op in found}
    assert (ops["incident"].method, ops["incident"].path) == ("GET", "/incidents/{batch_id}")
    assert ops["edit_stream"].body and {p.name for p in ops["edit_stream"].params} >= {"name", "allow_batched", "persist_mode"}
    limit = ops["losses"].signature().parameters["limit"]
    assert limit.default == 100 and "le=1000" in repr(limit.annotation)  # bounded as the API bounds it
    assert "Lost batches" in ops["losses"].description
    assert ops["history"].signature().parameters["table"].default is inspect.Parameter.empty


@pytest.mark.parametrize("text, answer", [("ORDERS", "/streams/ORDERS"), ("..", "/streams/%2E%2E"),
                                          ("a/../b", "/streams/a%2F..%2Fb"), ("x?y=1", "/streams/x%3Fy%3D1")])
def test_a_call_goes_to_the_apis_path_each_parameter_one_segment(document, text, answer):
    [op], _ = operations(document, ("edit_stream",))
    heard = []

    async def call(method, path, body=None, **query):
        heard.append((method, path, body, query))
        return 200, "{}"

    said = asyncio.run(tool_function(op, call)(name=text, allow_batched=False, system=None))
    assert said == "{}" and heard == [("PATCH", answer, {"allow_batched": False}, {})]


def _broken(document, change) -> dict:
    hostile = copy.deepcopy(document)
    change(hostile["paths"])
    return hostile


HOSTILE = {
    "a parameter of an unread type": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(schema={"type": "array"}),
    "a parameter named as a keyword": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(name="import"),
    "a parameter named as a dunder": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(name="__class__"),
    "a parameter with control characters": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(name="a\x1bb"),
    "parameters that are not a list": lambda p: p["/api/v1/checks"]["get"].update(parameters=[5]),
    "a reference that loops": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(
        schema={"$ref": "#/components/schemas/Loop"}),
    "a reference elsewhere": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(
        schema={"$ref": "https://evil.example/schema"}),
    "a huge enum": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(
        schema={"enum": [f"v{i}" for i in range(10_000)]}),
    "a header parameter": lambda p: p["/api/v1/checks"]["get"]["parameters"][0].update(**{"in": "header"}),
}


@pytest.mark.parametrize("how", HOSTILE)
def test_a_hostile_operation_is_left_out_with_its_reason_and_the_others_are_made(document, how):
    hostile = _broken(document, HOSTILE[how])
    hostile["components"]["schemas"]["Loop"] = {"$ref": "#/components/schemas/Loop"}
    found, whys = operations(hostile, READS)
    assert [op.tool for op in found] == [t for t in READS if t != "checks"]
    assert len(whys) == 1 and whys[0].startswith("checks: ") and len(whys[0]) < 300


@pytest.mark.parametrize("document", [None, [], "paths", {"paths": 5}, {"paths": {"/x": 5}}, {"paths": {"/x": {"get": 5}}},
                                      {"paths": {"/api/v1/losses": {"get": {"operationId": "losses", "parameters": 7}}}}])
def test_a_document_that_is_not_one_makes_no_tool_and_says_why(document):
    found, whys = operations(document, READS)
    assert found == [] and len(whys) == len(READS)


def test_a_big_number_bound_is_dropped_not_taken(document):
    hostile = _broken(document, lambda p: p["/api/v1/canary"]["get"]["parameters"][1]["schema"].update(maximum=10 ** 400))
    [op], _ = operations(hostile, ("canary",))
    assert "le=" not in repr(op.signature().parameters["minutes"].annotation)
