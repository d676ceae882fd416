"""``GET /v1/search``: the caller's own conversations that a query finds (titles and message text), best first.

The index is the search processor's (streams/search_index.py): keyed by the caller's data key, read
with the key the authentication fetched. The query is never logged and never quoted in an error.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import PayloadTooLarge, Unprocessable
from gateway.services import services

QUERY_MAX = 200
LIMIT_DEFAULT = 20
LIMIT_MAX = 50
PARAMETERS = frozenset({"q", "limit"})


async def search(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    params = request.query_params
    unknown = sorted(set(params) - PARAMETERS)
    if unknown:
        raise Unprocessable(f"`{unknown[0]}` is not a search parameter; send q and limit", code="unknown_parameter")
    q = params.get("q", "")
    if not q:  # one of only spaces or stopwords finds nothing: a 200 with no results
        raise Unprocessable("`q` must hold something to search for", code="missing_query")
    if len(q) > QUERY_MAX:
        raise PayloadTooLarge(f"`q` is over {QUERY_MAX} characters", code="query_too_long")
    raw = params.get("limit", str(LIMIT_DEFAULT))
    # ASCII digits, few of them: str.isdigit takes "²" and any length, which int() then refuses (a 500).
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 3) or not 1 <= int(raw) <= LIMIT_MAX:
        raise Unprocessable(f"`limit` must be an integer from 1 to {LIMIT_MAX}", code="invalid_limit")
    results = await svc.search.search(user.user_id, q, int(raw))
    return JSONResponse({"results": [r.public() for r in results]})
