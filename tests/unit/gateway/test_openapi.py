"""The OpenAPI document in schemas/ names every route the gateway serves, and only those."""

from __future__ import annotations

from pathlib import Path

import yaml
from starlette.routing import Route

from gateway.app import ROUTES

DOC = yaml.safe_load((Path(__file__).resolve().parents[3] / "schemas" / "openapi.yaml").read_text())
UNDOCUMENTED = {"/", "/openapi.yaml", "/openapi.json", "/s/{secret}"}  # the pages, and the document itself


def test_every_api_route_is_documented_with_its_methods() -> None:
    served: dict[str, set[str]] = {}
    for route in ROUTES:
        if isinstance(route, Route) and route.path not in UNDOCUMENTED:
            served.setdefault(route.path.replace(":path}", "}"), set()).update(m.lower() for m in (route.methods or ()) if m != "HEAD")
    documented = {path: {m for m in ops if m != "parameters"} for path, ops in DOC["paths"].items()}
    assert documented == served


def _operations() -> list[tuple[str, str, dict]]:
    return [
        (path, method, op)
        for path, ops in DOC["paths"].items()
        for method, op in ops.items()
        if method != "parameters"
    ]


def test_every_operation_documents_the_errors_it_can_answer() -> None:
    """DESIGN.md §7: 401 without a valid key, 404 for an id that is not the caller's, 400/413/415/422
    for a body that cannot be read, 503 while a backing service is down."""
    missing = []
    for path, method, op in _operations():
        codes = set(op["responses"])
        wanted = set()
        if op.get("security", DOC["security"]):
            wanted |= {"401", "503"}
        if "{" in path:
            wanted.add("404")
        if "requestBody" in op:
            wanted |= {"400", "413", "415", "422"}
        if wanted - codes:
            missing.append(f"{method.upper()} {path}: {sorted(wanted - codes)}")
    assert not missing


def test_every_error_has_the_error_shape() -> None:
    """``{"error": {"code", "message", …}}``, as JSON (a response may add fields, as 429 does)."""
    for path, method, op in _operations():
        for code, response in op["responses"].items():
            if not code.startswith(("4", "5")) or path in ("/readyz", "/health"):  # a probe's body is its checks
                continue
            ref = response.get("$ref", "")
            assert ref.startswith("#/components/responses/"), f"{method.upper()} {path} {code}"
            schema = DOC["components"]["responses"][ref.rsplit("/", 1)[1]]["content"]["application/json"]["schema"]
            assert schema["required"] == ["error"]
            assert {"code", "message"} <= set(schema["properties"]["error"]["required"]), f"{method.upper()} {path} {code}"


def test_the_documented_moderation_categories_are_the_ones_parley_scores() -> None:
    from moderation.categories import CATEGORIES

    schemas = DOC["components"]["schemas"]
    assert tuple(schemas["ModerationCategory"]["enum"]) == CATEGORIES
    assert tuple(schemas["OrgModerationPolicy"]["properties"]["thresholds"]["properties"]) == CATEGORIES


def test_every_operation_names_its_scope_and_the_credentials_that_hold_it() -> None:
    """DESIGN.md §12: ``x-parley-scope`` on every operation; ``security`` says which credentials hold that
    scope (a key holds ``chat`` only); an operation a key cannot call documents the key's 403."""
    from parley.users import KEY_SCOPES, SCOPES

    holders = {"none": [], **{s: [{"apiKey": []}, {"webSession": []}] if s in KEY_SCOPES else [{"webSession": []}] for s in SCOPES}}
    wrong = []
    for path, method, op in _operations():
        scope = op.get("x-parley-scope")
        if scope not in holders:
            wrong.append(f"{method.upper()} {path}: x-parley-scope {scope!r} is not one of {sorted(holders)}")
            continue
        if op.get("security", DOC["security"]) != holders[scope]:
            wrong.append(f"{method.upper()} {path}: security {op.get('security', DOC['security'])}, expected {holders[scope]}")
        if scope not in KEY_SCOPES and scope != "none" and "403" not in op["responses"]:
            wrong.append(f"{method.upper()} {path}: a key's 403 insufficient_scope is not documented")
    assert not wrong, "\n".join(wrong)
