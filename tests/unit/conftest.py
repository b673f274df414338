from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def document() -> dict:
    """The console's own OpenAPI document, made without a server (nothing is connected)."""
    from console.api.app import make_api
    from console.api.tokens import TokenStore
    from console.config import load
    from console.fleet import Fleet

    return make_api(Fleet(load(environ={})), TokenStore(Path("/nonexistent"))).openapi()
