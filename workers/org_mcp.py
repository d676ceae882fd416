"""Registering an organisation's MCP server (DESIGN.md §13): one procedure for the admin API
(``POST /v1/org/tools``, gateway/org_tools.py) and the operator's ``parley tools add NAME URL --org ORG``.

Every check comes before anything is kept: the name, the URL's scheme, the organisation's server count, the
listing asked through the SSRF guard (workers/net_guard.py), what the server lists (parley/org_tools.py
``checked``) and the operator's names, which an organisation's tool never shadows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from parley.errors import ConfigError, Unavailable
from parley.org_tools import MAX_SERVERS, SERVER_NAME, Listed, OrgTools, Server, checked
from workers.net_guard import Network, Refused
from workers.tool_mcp import list_tools

#: How long a registration waits for the server's listing.
LIST_TIMEOUT_S = 10.0


class NotRegistered(Exception):
    """Why a server was not kept: ``code`` names it for an API client; ``conflict`` when the request is sound
    but the organisation's state refuses it (a 409, not a 422)."""

    def __init__(self, message: str, code: str, *, conflict: bool = False) -> None:
        super().__init__(message)
        self.code, self.conflict = code, conflict


async def register(
    store: OrgTools,
    org_id: str,
    name: str,
    url: str,
    *,
    operator_tools: Collection[str],
    allow_networks: Sequence[Network],
    timeout_s: float = LIST_TIMEOUT_S,
) -> Server:
    """The server at ``url`` kept as ``org_id``'s ``name`` (the same name again replaces it), or NotRegistered."""
    if not SERVER_NAME.fullmatch(name):
        raise NotRegistered("the name is 1 to 32 letters, digits, _ or -", "invalid_name")
    if not url.startswith(("http://", "https://")):
        raise NotRegistered("the URL is the server's streamable-HTTP endpoint, an http(s) URL", "invalid_url")
    servers = await store.servers(org_id)
    if name not in {s.name for s in servers} and len(servers) >= MAX_SERVERS:
        raise NotRegistered(f"an organisation registers at most {MAX_SERVERS} MCP servers", "too_many_servers", conflict=True)
    try:
        listed = await list_tools(url, timeout_s, guard=allow_networks)
    except Refused as exc:
        raise NotRegistered(f"the server's address is refused: {exc}", "address_refused") from None
    except Unavailable as exc:
        raise NotRegistered(str(exc), "server_unreachable") from None
    try:
        server = checked(name, url, [Listed(t.name, t.description, t.input_schema) for t in listed])
    except ConfigError as exc:
        raise NotRegistered(str(exc), "invalid_server") from None
    taken = [t.name for t in server.tools if t.name in operator_tools]
    if taken:
        raise NotRegistered(f"{taken[0]!r} is one of the operator's tools; choose another name", "tool_name_taken", conflict=True)
    return await store.put(org_id, server)
