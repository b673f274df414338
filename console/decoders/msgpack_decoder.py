"""MessagePack, as its reference library reads it: maps with any plain key, binary as bytes; extension
types (application-defined, not data the console can read) refused; lengths bounded by the payload."""

from __future__ import annotations

from typing import Any, Mapping

import msgpack

from console.decoders import MAX_VALUES, DecodeError, Decoder


def _no_extension(code: int, data: bytes) -> Any:
    raise DecodeError(f"a MessagePack extension type ({code}): not data the console can read")


class MsgpackDecoder(Decoder):
    encoding = "msgpack"

    def _decode(self, data: bytes, headers: Mapping[str, str]) -> Any:
        size = len(data)
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_no_extension,
                               max_str_len=size, max_bin_len=size, max_array_len=min(size, MAX_VALUES),
                               max_map_len=min(size, MAX_VALUES))
