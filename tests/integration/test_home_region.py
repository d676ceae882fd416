"""An organisation's home region (docs/multi-region.md): a gateway of another region answers its
requests 421 with ``Parley-Home-Region``; its own region, and organisations without one, are served.
The authenticator against real Cassandra, in a Starlette app of its own (no Kafka needed)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.auth import Authenticator
from gateway.directory import Directory
from gateway.errors import ApiError
from parley.cassandra import AsyncCql
from parley.users import create_org, create_user


async def whoami(request: Request) -> Response:
    user = await request.app.state.services.auth(request)
    return JSONResponse({"user_id": user.user_id})


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


def gateway(cassandra_settings, region: str) -> TestClient:
    app = Starlette(routes=[Route("/whoami", whoami)], exception_handlers={ApiError: _api_error})
    app.state.services = SimpleNamespace(auth=Authenticator(Directory(AsyncCql(cassandra_settings)), 0.0, region=region))
    return TestClient(app)


def test_an_organisation_is_served_only_in_its_home_region(cassandra, cassandra_settings) -> None:
    cassandra.set_keyspace(cassandra_settings.keyspace)
    eu_org = create_org(cassandra, f"eu-{uuid.uuid4().hex[:6]}")
    cassandra.execute("UPDATE orgs SET residency = 'eu' WHERE org_id = %s", (eu_org,))
    _, eu_key = create_user(cassandra, "eu-member", org_id=eu_org)
    _, anywhere_key = create_user(cassandra, "no-residency")

    def status(region: str, key: str) -> tuple[int, dict]:
        with gateway(cassandra_settings, region) as client:
            r = client.get("/whoami", headers={"Authorization": f"Bearer {key}"})
            return r.status_code, {"home": r.headers.get("parley-home-region"), **r.json()}

    code, body = status("us", eu_key)
    assert code == 421 and body["home"] == "eu" and body["error"]["code"] == "wrong_region"
    assert status("eu", eu_key)[0] == 200
    assert status("", eu_key)[0] == 200, "a single-region deployment checks nothing"
    assert status("us", anywhere_key)[0] == 200, "an organisation without residency is served anywhere"
