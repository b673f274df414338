"""Errors as RFC 9457 problem details: every refusal of the API, its status, a title and what happened."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel

PROBLEM = "application/problem+json"


class Problem(Exception):
    """An RFC 9457 problem: the status, a short title and what happened."""

    def __init__(self, status: int, title: str, detail: str = ""):
        super().__init__(detail or title)
        self.status, self.title, self.detail = status, title, detail


def problem(status: int, title: str, detail: str, instance: str) -> JSONResponse:
    return JSONResponse({"type": "about:blank", "title": title, "status": status, "detail": detail[:1000],
                         "instance": instance[:300]}, status_code=status, media_type=PROBLEM,
                        headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


class ProblemOut(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str = ""
    instance: str = ""


ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ProblemOut, "content": {PROBLEM: {}}}
                                 for code in (400, 401, 403, 404, 405, 409, 413, 422, 429, 503)}
