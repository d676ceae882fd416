"""The edge's HAProxy configuration, written from Parley's settings (pure: settings in, text out).

HAProxy parses, frames and forwards every request: it is the part the field trusts with
request smuggling, hop-by-hop headers, HTTP/2 and TLS. What Parley adds is the routing rule
and its own trust rules at the boundary:

- **Routing.** ``edge/route.lua`` gives a request's ``chat.tokens`` partition (its
  conversation's, or its resume cursor's); the request goes to backend ``owner_<p mod N>``,
  whose one active server is that shard's gateway and whose backups are the gateways after
  it in ring order, so a down owner's share goes to one neighbour (HAProxy uses the first
  backup that is up). Anything else goes to ``any``, round-robin. No re-route after a
  response: the requests that name no conversation (a regenerate, a cursorless resume,
  ``/v1/chat/completions``) are served where they land, which borrows the partition for the
  stream (gateway/tokens.py). The edge strips ``X-Parley-Route``, so no gateway answers 421
  through it.
- **Trust.** ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are set to what HAProxy saw (a
  client's own are replaced); ``Forwarded`` is removed. ``/metrics`` is refused (404), and
  methods the API does not have (405: ``CONNECT``, ``TRACE``). Hop-by-hop headers are
  removed (``edge/headers.lua``), ``Upgrade`` among them: the API has no WebSocket, so an
  upgrade is served as plain HTTP, its body framed as any other.
- **Body limits by route.** ``POST /v1/documents`` up to the documents limit (plus the
  multipart framing), ``POST /v1/imports`` up to the import limit, every other request the gateway's JSON limit: a ``Content-Length``
  over it is a 413 here. A chunked body is passed on and the gateway counts it (it
  streams bodies with the same limits; an upload without a length is a 411 there).
- **The shard map.** ``edge/shards.lua`` logs a gateway whose ``/readyz`` names another shard than
  its place in PARLEY_EDGE_GATEWAYS.
- **Streams.** Responses are never buffered (no compression, no cache): SSE passes event
  by event, over HTTP/1.1 or HTTP/2. A response may pause up to PARLEY_EDGE_SILENCE_S.

Every error the edge answers itself is Parley's JSON error shape, but one: a request HAProxy's HTTP/1
parser cannot frame gets HAProxy's own 400 page and a closed connection (HAProxy 2.6 applies no
errorfile to its parser's errors; 3.2 does: haproxy/haproxy#3032).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import ip_address

from edge.settings import EdgeSettings

#: Multipart framing around an uploaded file (boundaries, part headers, a conversation id): gateway/documents.py's
#: FORM_OVERHEAD, which the gateway adds to the same limit.
FORM_OVERHEAD = 64 * 1024
#: Methods the API serves; anything else is a 405 at the edge (CONNECT and TRACE above all).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
#: HAProxy keeps this much of its buffer free for header rewrites: the head it takes is the rest.
MAXREWRITE = 1024

#: status → (code, message) of the errors HAProxy itself answers (a gateway's own errors pass as they are).
ERRORS = {
    400: ("bad_request", "not a request the edge accepts: malformed or ambiguous HTTP framing"),
    403: ("forbidden", "refused by the edge"),
    404: ("not_found", "no such route"),
    405: ("method_not_allowed", "the API serves GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS"),
    408: ("request_timeout", "the request did not arrive in time"),
    413: ("payload_too_large", "request body over the limit"),
    425: ("too_early", "retry the request"),
    429: ("rate_limited", "too many requests"),
    500: ("internal", "the edge failed; retry"),
    501: ("not_implemented", "a transfer coding the edge does not take"),
    502: ("unavailable", "a gateway answered with invalid HTTP; retry"),
    503: ("unavailable", "no gateway is reachable; retry shortly"),
    504: ("unavailable", "the gateway did not answer in time; retry"),
}


@dataclass(frozen=True)
class Limits:
    """Largest request bodies, by route: the gateway's own limits."""

    json_bytes: int  # PARLEY_GATEWAY_MAX_BODY: every JSON route
    upload_bytes: int  # PARLEY_DOCUMENTS_MAX_BYTES + FORM_OVERHEAD: POST /v1/documents
    import_bytes: int  # PARLEY_GATEWAY_IMPORT_MAX_BYTES: POST /v1/imports (an export, JSON or zip)


def render(
    settings: EdgeSettings,
    limits: Limits,
    partitions: int,
    lua_paths: Sequence[str],
    shard_check: str | None = None,
    pem_path: str | None = None,
    metrics: tuple[str, int] | None = None,
) -> str:
    """haproxy.cfg for ``settings``: ``lua_paths`` are loaded in every thread (edge/route.lua, edge/headers.lua),
    ``shard_check`` once (edge/shards.lua), ``pem_path`` is the certificate and key (HTTPS when given),
    ``metrics`` the (host, port) of HAProxy's Prometheus exporter."""
    gateways = settings.addresses
    n = len(gateways)
    scheme = "https" if pem_path else "http"
    upload_refusal = _json_body(_too_large("too_large", limits.upload_bytes, "PARLEY_DOCUMENTS_MAX_BYTES"))
    json_refusal = _json_body(_too_large("payload_too_large", limits.json_bytes, "PARLEY_GATEWAY_MAX_BODY"))
    over_upload = f"{{ req.hdr_val(content-length) gt {limits.upload_bytes} }}"
    over_json = f"{{ req.hdr_val(content-length) gt {limits.json_bytes} }}"
    import_refusal = _json_body(_too_large("payload_too_large", limits.import_bytes, "PARLEY_GATEWAY_IMPORT_MAX_BYTES"))
    over_import = f"{{ req.hdr_val(content-length) gt {limits.import_bytes} }}"
    bind = f"bind {_address(settings.host, settings.port)}"
    if pem_path:
        bind += f" ssl crt {pem_path} alpn h2,http/1.1"
    out = [
        "# Written by `parley edge` (edge/config.py) from its settings; `python -m edge --config` prints it.",
        "global",
        "    log stdout format raw local0 info",
        *(f"    lua-load-per-thread {path}" for path in lua_paths),
        *(
            [f"    setenv EDGE_SHARD_MAP {','.join(f'[{h}]:{p}' for h, p in gateways)}",
             f"    setenv EDGE_SHARD_CHECK_MS {max(1000, round(settings.health_s * 1000))}",
             f"    lua-load {shard_check}"]
            if shard_check and n > 1 else []
        ),  # fmt: skip
        f"    tune.bufsize {settings.max_head_bytes + MAXREWRITE}",
        f"    tune.maxrewrite {MAXREWRITE}",
        "    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets",
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option dontlog-normal  # what goes wrong only: paths carry ids, a line per token stream adds nothing",
        "    log-format " + _quote(_LOG_FORMAT),
        f"    timeout connect {_ms(settings.connect_timeout_s)}",
        f"    timeout client {_ms(settings.silence_s)}",
        f"    timeout server {_ms(settings.silence_s)}",
        f"    timeout http-keep-alive {_ms(settings.idle_s)}",
        "    timeout http-request 10s  # the whole head; a trickled one is cut",
        f"    timeout queue {_ms(settings.connect_timeout_s)}",
        f"    timeout check {_ms(max(1.0, settings.health_s))}  # a busy gateway's slow answer is not a down gateway",
        "    retries 2",
        "    option redispatch 1  # a connection refused is tried on the next server (the backup, once it is down)",
        "    http-reuse safe",
        *(f"    http-error status {status} {_json_body(_error(status))}" for status in ERRORS),
        "",
        "frontend api",
        f"    {bind}",
        *_readiness(),
        f"    http-request deny deny_status 405 if !{{ method {' '.join(METHODS)} }}",
        "    http-request deny deny_status 404 if { path,url_dec -m reg ^/+metrics(/|$) }",
        # The path the log line shows (only a failed request is logged): a share link's secret masked.
        "    http-request set-var(txn.logpath) path,regsub([A-Za-z0-9_-]{43},<secret>,g)",
        "    acl upload path /v1/documents",
        "    acl import path /v1/imports",
        f"    http-request deny deny_status 413 {upload_refusal} if METH_POST upload {over_upload}",
        f"    http-request deny deny_status 413 {import_refusal} if METH_POST import {over_import}",
        f"    http-request deny deny_status 413 {json_refusal} if !METH_POST {over_json} || !upload !import {over_json}",
        "    http-request lua.parley_hop_by_hop",
        "    http-request set-header X-Forwarded-For %[src]",
        f"    http-request set-header X-Forwarded-Proto {scheme}",
        "    http-request del-header Forwarded",
        "    http-request del-header X-Parley-Route",
        f"    http-request set-var(txn.partition) lua.parley_partition({partitions})",
        f"    use_backend owner_%[var(txn.partition),mod({n})] if {{ var(txn.partition) -m int ge 0 }}",
        "    default_backend any",
    ]
    for i in range(n):
        out += ["", f"backend owner_{i}", *_checks()]
        for k in range(n):
            g = (i + k) % n
            out.append(_server(g, gateways[g], settings) + (" backup" if k else ""))
    out += ["", "backend any", "    balance roundrobin", *_checks()]
    out += [_server(g, address, settings) for g, address in enumerate(gateways)]
    if any(not _is_ip(host) for host, _ in gateways):  # names (a StatefulSet's pods) are looked up again as they move
        out += ["", "resolvers system", "    parse-resolv-conf", "    hold valid 10s"]
    if metrics is not None:
        out += [
            "",
            "frontend metrics",
            f"    bind {_address(*metrics)}",
            "    http-request use-service prometheus-exporter if { path /metrics }",
            "    http-request deny deny_status 404",
        ]
    return "\n".join(out) + "\n"


#: One JSON object a line, as Parley's own logs (parley/logs.py); only failed or cut requests are logged. A share
#: link's secret (43 URL-safe characters, /s/<secret>, /v1/shares/<secret>) never reaches the line.
_LOG_FORMAT = (
    '{"ts":"%[date,utime(%Y-%m-%dT%H:%M:%SZ)]","level":"warning","service":"edge","message":"request ended abnormally",'
    '"method":"%HM","path":"%[var(txn.logpath)]","status":%ST,"backend":"%b","server":"%s","termination":"%ts",'
    '"request_ms":%TR,"connect_ms":%Tc,"response_ms":%Tr,"total_ms":%Ta}'
)


def _readiness() -> list[str]:
    """``GET /edge/readyz``: 200 while any gateway's health check passes (what a load balancer in front asks)."""
    up = '{"ready":true,"gateways_up":%[nbsrv(any)]}'
    down = '{"ready":false,"gateways_up":0}'
    return [
        "    acl readyz path /edge/readyz",
        f"    http-request return status 200 content-type application/json lf-string {_quote(up)} if readyz {{ nbsrv(any) gt 0 }}",
        f"    http-request return status 503 content-type application/json string {_quote(down)} if readyz",
    ]


def _checks() -> list[str]:
    return ["    option httpchk", "    http-check send meth GET uri /readyz", "    http-check expect status 200"]


def _server(g: int, address: tuple[str, int], settings: EdgeSettings) -> str:
    # A refused connection marks the gateway down at once (the request goes on to the next); the health check,
    # every PARLEY_EDGE_HEALTH_S, brings it back at its first 200.
    line = (
        f"    server g{g} {_address(*address)} check inter {_ms(settings.health_s)} fall 1 rise 1"
        " observe layer4 error-limit 1 on-error mark-down"
    )
    if not _is_ip(address[0]):
        line += " resolvers system init-addr last,libc,none"
    return line


def _is_ip(host: str) -> bool:
    try:
        ip_address(host)
    except ValueError:
        return False
    return True


def _address(host: str, port: int) -> str:
    return f"ipv6@{host}:{port}" if ":" in host else f"{host}:{port}"


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _error(status: int) -> str:
    code, message = ERRORS[status]
    return json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))


def _too_large(code: str, limit: int, setting: str) -> str:
    message = f"request body over {limit} bytes (the limit of this route: {setting})"
    return json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))


def _json_body(text: str) -> str:
    return f"content-type application/json string {_quote(text)}"


def _quote(text: str) -> str:
    """``text`` as one HAProxy word: single quotes take everything literally but a single quote."""
    if "'" in text:
        raise ValueError(f"a single quote cannot be in a HAProxy config string: {text!r}")
    return f"'{text}'"
