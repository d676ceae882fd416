"""The OpenAPI document in schemas/ names every route the gateway serves, and only those."""

from __future__ import annotations

from pathlib import Path

import yaml
from starlette.routing import Route

from gateway.app import ROUTES

DOC = yaml.safe_load((Path(__file__).resolve().parents[2] / "schemas" / "openapi.yaml").read_text())
UNDOCUMENTED = {"/", "/metrics", "/openapi.yaml", "/openapi.json"}


def test_every_api_route_is_documented_with_its_methods() -> None:
    served: dict[str, set[str]] = {}
    for route in ROUTES:
        if isinstance(route, Route) and route.path not in UNDOCUMENTED:
            served.setdefault(route.path, set()).update(m.lower() for m in (route.methods or ()) if m != "HEAD")
    documented = {path: {m for m in ops if m != "parameters"} for path, ops in DOC["paths"].items()}
    assert documented == served
