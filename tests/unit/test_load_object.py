"""load_object reads JSON at orjson's speed and exactly as the standard library reads it: the same
object for whatever it takes, the same refusal for whatever it refuses."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.domain.wire import MalformedInput, load_object


def standard(data: bytes):
    try:
        obj = json.JSONDecoder().decode(data.decode())
    except RecursionError:
        return "nested too deeply"
    except (ValueError, TypeError):
        return "not JSON"
    return obj if isinstance(obj, dict) else "not a JSON object"


def ours(data: bytes):
    try:
        return load_object(data)
    except MalformedInput as e:
        return e.reason


def same(a, b) -> bool:  # NaN is not equal to itself
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b)


@pytest.mark.parametrize("data", [
    b'{"seq":' + b"9" * 30 + b'}',  # orjson makes it a float: read again
    b'{"seq":18446744073709551616}', b'{"seq":-9223372036854775809}', b'{"seq":9223372036854775807}',
    b'{"a":NaN}', b'{"a":Infinity}', b'{"a":1e400}', b'{"a":"\\ud800"}', b'{"a":1,"a":2}', b'\xef\xbb\xbf{}',
    b'{"a":"\xff"}', b'{"a":' + b"[" * 30_000 + b"]" * 30_000 + b"}", b'{"a":' * 2000 + b"1" + b"}" * 2000, b" {} ", b"{}x",
    b'{"a":-0}', b'{"a":1.0000000000000002}', b'"text"', b"", b'{"t":"1234567890123456789012"}',
], ids=lambda data: repr(data[:40]))
def test_odd_bodies_read_as_the_standard_library_reads_them(data):
    assert same(ours(data), standard(data))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@settings(deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_any_object_reads_as_the_standard_library_reads_it(obj):
    data = json.dumps(obj).encode()
    assert same(ours(data), standard(data))


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_read_or_refused_as_the_standard_library_does(data):
    assert same(ours(data), standard(data))
