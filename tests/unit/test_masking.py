"""Masking rules, read strictly, and what they leave of a message: pure."""

import json

import pytest

from console.domain.masking import MASK, MaskRulesError, load_masking

RULES = """
[[mask]]
streams = ["ORDERS*"]
fields = ["customer.email", "card.*", "items[*].price"]
headers = ["Authorization"]

[[mask]]
streams = ["AUDIT"]
headers = ["X-User"]
"""


def test_fields_and_headers_are_masked_on_the_streams_named():
    masking = load_masking(RULES)
    body = {"customer": {"email": "a@b.c", "name": "Ann"}, "card": {"number": "4111", "cvv": "123"},
            "items": [{"price": 5, "sku": "x"}, {"price": 7, "sku": "y"}], "total": 12}
    headers, data = masking.apply("ORDERS_EU", (("Authorization", "Bearer s3cret"), ("kind", "order")),
                                  json.dumps(body).encode())
    shown = json.loads(data)
    assert headers == (("Authorization", MASK), ("kind", "order"))
    assert shown == {"customer": {"email": MASK, "name": "Ann"}, "card": {"number": MASK, "cvv": MASK},
                     "items": [{"price": MASK, "sku": "x"}, {"price": MASK, "sku": "y"}], "total": 12}
    assert masking.apply("OTHER", (("Authorization", "t"),), b'{"card": 1}') == ((("Authorization", "t"),), b'{"card": 1}')


def test_a_payload_that_is_not_json_is_masked_whole_and_payloads_off_show_none():
    masking = load_masking(RULES)
    assert masking.apply("ORDERS", (), b"email=a@b.c")[1] == MASK.encode()
    off = load_masking(RULES, payloads=False)
    assert off.apply("ANY", (), b'{"secret": 1}')[1] == b"(payloads are off: 13 bytes)"


@pytest.mark.parametrize("text, line", [
    ('[[mask]]\nstreams = ["A"]\nfields = ["a..b"]\n', 1),
    ('[[mask]]\nstreams = ["A"]\n', 1),
    ('[[mask]]\nstreams = []\nheaders = ["x"]\n', 1),
    ('[[mask]]\nstreams = ["A"]\nheaders = ["x"]\n\n[[mask]]\nstreams = ["B"]\nfield = ["a"]\n', 5),
    ('[[mask]]\nstreams = ["A"]\nheaders = ["x\\u0007"]\n', 1),
    ('[[mask]]\nstreams = ["A"]\nfields = ["' + "a." * 30 + 'b"]\n', 1),
    ("[[mask]\n", 1),
    ('[[rule]]\nname = "x"\n', None),
])
def test_a_rules_file_with_an_error_is_refused_whole_with_its_line(text, line):
    with pytest.raises(MaskRulesError) as refused:
        load_masking(text)
    assert refused.value.line == line
