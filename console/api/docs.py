"""/api/v1/docs: the API's reference as one page made from its OpenAPI document, served by the console
itself (no script, font or style sheet from anywhere else, as every page of the console)."""

from __future__ import annotations

import html
import json
from typing import Any

import tornado.web

STYLE = ("body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d2330}"
         "code,pre{background:#f1f3f5;padding:.1rem .3rem;border-radius:3px}h2{border-bottom:1px solid #ddd}"
         ".m{display:inline-block;min-width:4.2rem;font-weight:700}")


def reference(document: dict[str, Any]) -> str:
    e = html.escape
    parts = [f"<!doctype html><html lang=en><meta charset=utf-8><title>{e(document['info']['title'])}</title>"
             f"<style>{STYLE}</style><h1>{e(document['info']['title'])}</h1>"
             "<p>Every call names a token: <code>Authorization: Bearer bct_...</code> "
             "(<code>batch-console token create --name NAME --role ROLE</code>). Errors are RFC 9457 problem details. "
             "The machine-readable document: <a href=/api/v1/openapi.json>/api/v1/openapi.json</a>.</p>"]
    for path, operations in document.get("paths", {}).items():
        for method, op in operations.items():
            params = ", ".join(f"<code>{e(p['name'])}</code> ({e(p['in'])})" for p in op.get("parameters", []))
            body = " · body: JSON" if "requestBody" in op else ""
            parts.append(f"<h2><span class=m>{e(method.upper())}</span> <code>{e(path)}</code></h2>"
                         f"<p>{e(op.get('summary', ''))}. {e(op.get('description', ''))}</p>"
                         + (f"<p>Parameters: {params}{body}</p>" if params or body else ""))
    return "".join(parts)


class DocsHandler(tornado.web.RequestHandler):
    def initialize(self, app: Any) -> None:
        self.app = app

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.write(reference(json.loads(json.dumps(self.app.openapi(), default=str))))
