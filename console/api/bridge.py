"""The API (an ASGI app) served by the web console's own Tornado server, on its port: each request under
/api/v1/ handed to the app in this process, its answer written back. No second server, no second port."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import tornado.http1connection
import tornado.web

MAX_BODY = 64 * 1024  # a batch-settings change is a few dozen bytes
MAX_REQUEST_BODY = 1 << 20  # any request's body on the web's port (the pages' own talk is on their websocket)
TOO_LARGE = b'{"type":"about:blank","title":"Request too large","status":413}'


@tornado.web.stream_request_body
class AsgiHandler(tornado.web.RequestHandler):
    """Its body is taken as it arrives and refused past MAX_BODY, by its Content-Length before a byte of it
    is read: a caller without a token cannot make the web hold 90 MiB of it (six did, 1 GiB)."""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS", "TRACE", "QUERY")  # the app answers each

    def initialize(self, app: Any) -> None:
        self.app = app
        self._body = bytearray()
        self._too_large = False

    def check_xsrf_cookie(self) -> None:  # a token in a header, never a cookie: no cross-site request rides along
        pass

    def prepare(self) -> None:
        declared = self.request.headers.get("Content-Length", "0")
        if not declared.isdigit() or int(declared) > MAX_BODY:
            self._refuse()
            return
        connection = self.request.connection
        if isinstance(connection, tornado.http1connection.HTTP1Connection):  # a chunked body past it ends it
            connection.set_max_body_size(MAX_BODY)

    def data_received(self, chunk: bytes) -> None:
        if self._too_large:
            return
        self._body += chunk
        if len(self._body) > MAX_BODY:
            self._body.clear()
            self._refuse()

    def _refuse(self) -> None:
        self._too_large = True
        self.set_status(413)
        self.set_header("Content-Type", "application/problem+json")
        self.set_header("Connection", "close")
        self.finish(TOO_LARGE)

    async def _call(self, *_: Any) -> None:
        if self._too_large or self._finished:
            return
        request = self.request
        body = bytes(self._body)
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
                 "scheme": request.protocol, "path": unquote(request.path), "raw_path": request.path.encode(),
                 "query_string": request.query.encode("latin-1", "replace"), "root_path": "",
                 "headers": [(k.lower().encode("latin-1"), v.encode("latin-1", "replace"))
                             for k, v in request.headers.get_all()],
                 "client": (request.remote_ip, 0), "server": None}
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.set_status(message["status"])
                self.clear_header("Content-Type")
                for key, value in message.get("headers", []):
                    if key.lower() != b"content-length":  # Tornado counts what it writes
                        self.add_header(key.decode("latin-1"), value.decode("latin-1"))
            elif message["type"] == "http.response.body":
                if body := message.get("body", b""):  # none at all for a 204: Tornado refuses even b""
                    self.write(body)
                if not message.get("more_body"):
                    self.finish()

        await self.app(scope, receive, send)

    get = head = post = patch = put = delete = options = trace = query = _call
