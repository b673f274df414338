"""JSON and text, as the console has always read them."""

from __future__ import annotations

import json
from typing import Any, Mapping

from console.decoders import Decoder


class JsonDecoder(Decoder):
    encoding = "json"

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        return json.loads(data)


class TextDecoder(Decoder):
    encoding = "text"

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        return data.decode("utf-8")
