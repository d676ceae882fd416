"""The edge's HAProxy configuration (edge/config.py, edge/route.lua, edge/headers.lua): as written, and as
HAProxy runs it.

The running tests start the real `python -m edge` (it execs Debian's haproxy) in front of four stand-in
gateways: small HTTP servers in this process that answer with their index and what reached them. The
rule HAProxy applies is compared with Parley's own (parley/partitioning.py, parley/shards.py); the desync
shapes against the real gateways are in tests/e2e/test_gateway_shards.py.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge.__main__ import LUA, SHARD_CHECK
from edge.config import FORM_OVERHEAD, Limits, render
from edge.settings import EdgeSettings
from parley.errors import ConfigError
from parley.partitioning import partition_for
from tools.supervisor import free_port

HAPROXY = "/usr/sbin/haproxy"
PARTITIONS = 12
N = 4
LIMITS = Limits(json_bytes=1000, upload_bytes=5000, import_bytes=9000)


def config(**settings: Any) -> str:
    gateways = ",".join(f"http://127.0.0.1:{9001 + i}" for i in range(N))
    return render(EdgeSettings(**{"gateways": gateways, **settings}), LIMITS, PARTITIONS, LUA, SHARD_CHECK, metrics=("127.0.0.1", 9100))


def haproxy_accepts(text: str, tmp_path: Path) -> None:
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    checked = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# ------------------------------------------------------------------ as written


def test_the_configuration_is_valid_haproxy(tmp_path: Path) -> None:
    haproxy_accepts(config(), tmp_path)


def test_each_shard_has_a_backend_whose_backups_are_the_ring_after_it() -> None:
    text = config()
    for i in range(N):
        backend = text.split(f"\nbackend owner_{i}\n", 1)[1].split("\n\n", 1)[0]
        servers = [line.split()[1] for line in backend.splitlines() if line.strip().startswith("server ")]
        assert servers == [f"g{(i + k) % N}" for k in range(N)]
        assert [line.endswith(" backup") for line in backend.splitlines() if "server " in line] == [False] + [True] * (N - 1)
    assert f"use_backend owner_%[var(txn.partition),mod({N})]" in text
    assert f"lua.parley_partition({PARTITIONS})" in text


def test_the_clients_forwarding_headers_are_replaced_and_metrics_refused() -> None:
    text = config()
    assert "http-request set-header X-Forwarded-For %[src]" in text  # set, never appended to the client's
    assert "http-request set-header X-Forwarded-Proto http" in text
    assert "http-request del-header Forwarded" in text
    assert "option forwardfor" not in text
    assert "http-request deny deny_status 404 if { path,url_dec -m reg ^/+metrics(/|$) }" in text


def test_body_limits_by_route() -> None:
    from gateway.documents import FORM_OVERHEAD as GATEWAYS_FORM_OVERHEAD

    assert FORM_OVERHEAD == GATEWAYS_FORM_OVERHEAD, "an upload the gateway takes passes the edge"
    text = config()
    assert "if METH_POST upload { req.hdr_val(content-length) gt 5000 }" in text
    assert "if METH_POST import { req.hdr_val(content-length) gt 9000 }" in text
    assert "if !METH_POST { req.hdr_val(content-length) gt 1000 } || !upload !import { req.hdr_val(content-length) gt 1000 }" in text


def test_a_share_links_secret_is_masked_in_the_edges_log_line() -> None:
    import re

    text = config()
    line = re.search(r"log-format '([^']*)'", text).group(1)
    assert "%HPO" not in line and "%HU" not in line and '"path":"%[var(txn.logpath)]"' in line
    assert "http-request set-var(txn.logpath) path,regsub([A-Za-z0-9_-]{43},<secret>,g)" in text


def test_tls_serves_http2_and_http11(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    text = render(EdgeSettings(tls_cert=str(cert), tls_key=str(key)), LIMITS, PARTITIONS, LUA, pem_path=str(cert))
    assert f"ssl crt {cert} alpn h2,http/1.1" in text
    assert "X-Forwarded-Proto https" in text


def test_settings_refuse_what_haproxy_could_not_run(tmp_path: Path) -> None:
    assert EdgeSettings(gateways="http://127.0.0.1:8001, 10.0.0.2:8002,").addresses == [("127.0.0.1", 8001), ("10.0.0.2", 8002)]
    for bad in ("", "https://h:1", "http://h:1/prefix", "ftp://h"):
        with pytest.raises(ConfigError, match="PARLEY_EDGE_GATEWAYS"):
            EdgeSettings(gateways=bad)
    with pytest.raises(ConfigError, match="PARLEY_EDGE_TLS_KEY"):
        EdgeSettings(tls_key=str(self_signed(tmp_path)[1]))
    with pytest.raises(ConfigError, match="PARLEY_EDGE_TLS_CERT"):
        EdgeSettings(tls_cert="/nonexistent.pem")
    with pytest.raises(ConfigError, match="PARLEY_EDGE_SILENCE_S"):
        EdgeSettings(silence_s=0)


def test_a_name_is_resolved_again_while_running() -> None:
    text = render(EdgeSettings(gateways="http://gateway-0.gateway:8000"), LIMITS, PARTITIONS, LUA)
    assert "resolvers system init-addr last,libc,none" in text and "\nresolvers system\n    parse-resolv-conf" in text


# ------------------------------------------------------------------ as HAProxy runs it


class StandIn(BaseHTTPRequestHandler):
    """Answers every request with the index of its server, and the request as it arrived."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith("/v1/stream"):
            self._stream()
            return
        if self.path == "/readyz":  # what a gateway's says: the shard it runs as
            self._json({"ready": True, "shard": self.server.claims})  # type: ignore[attr-defined]
            return
        self._json({
            "gateway": self.server.index,  # type: ignore[attr-defined]
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": len(body),
        })  # fmt: skip

    def _json(self, body: object) -> None:
        out = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _stream(self) -> None:
        """Two SSE events; the second only once the client has seen the first (nothing may hold it back)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n in (1, 2):
            if n == 2:
                assert self.server.seen_first.wait(30)  # type: ignore[attr-defined]
            event = f"id: 0:{n}\nevent: delta\ndata: {{\"n\": {n}}}\n\n".encode()
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # HAProxy resets a health check's connection once it has the answer


class Edge:
    def __init__(self, url: str, metrics: str, servers: list[Quiet], log: Path) -> None:
        self.url, self.metrics, self.servers, self.log = url, metrics, servers, log

    def backend_requests(self, backend: str) -> float:
        want = f'haproxy_backend_http_requests_total{{proxy="{backend}"}}'
        for line in httpx.get(self.metrics, timeout=10).text.splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0


def start_edge(tmp_path: Path, extra_env: dict[str, str] | None = None) -> tuple[Edge, subprocess.Popen]:
    servers = []
    for i in range(N):
        server = Quiet(("127.0.0.1", 0), StandIn)
        server.index, server.claims, server.seen_first = i, f"{i}/{N}", threading.Event()  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    port, metrics = free_port(), free_port()
    env = {
        **os.environ,
        "PARLEY_EDGE_PORT": str(port),
        "PARLEY_EDGE_GATEWAYS": ",".join(f"http://127.0.0.1:{s.server_address[1]}" for s in servers),
        "PARLEY_EDGE_HEALTH_S": "0.5",
        "PARLEY_METRICS_PORT": str(metrics),
        "PARLEY_GATEWAY_MAX_BODY": "1000",
        "PARLEY_DOCUMENTS_MAX_BYTES": "5000",
        **(extra_env or {}),
    }
    log = open(tmp_path / "edge.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "edge"], env=env, stdout=log, stderr=subprocess.STDOUT)
    scheme = "https" if "PARLEY_EDGE_TLS_CERT" in env else "http"
    edge = Edge(f"{scheme}://127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics", servers, tmp_path / "edge.log")
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, (tmp_path / "edge.log").read_text()
        try:
            if httpx.get(f"{edge.url}/edge/readyz", timeout=1, verify=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, (tmp_path / "edge.log").read_text()
        time.sleep(0.1)
    return edge, process


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    running, process = start_edge(tmp_path_factory.mktemp("edge"))
    try:
        yield running
    finally:
        process.terminate()  # SIGTERM to haproxy itself: `python -m edge` exec'd it
        assert process.wait(10) is not None
        for server in running.servers:
            server.shutdown()


def raw(edge: Edge, request: bytes) -> tuple[bytes, bytes]:
    """(head, body) of the answer to ``request`` sent as these bytes; the edge closes after it."""
    with socket.create_connection(("127.0.0.1", int(edge.url.rsplit(":", 1)[1]))) as s:
        s.sendall(request)
        answer = b"".join(iter(lambda: s.recv(4096), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


def get(edge: Edge, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(edge.url + path, timeout=10, **kwargs)


def test_a_conversations_requests_go_to_the_owner_of_its_partition(edge: Edge) -> None:
    ids = [str(uuid.uuid4()) for _ in range(24)] + ["a", "21", "abc", "foobar", "a-little-bit-long-string", "x" * 7]
    for cid in ids:  # uuids are 36 bytes; the short ones take murmur2's 1-, 2- and 3-byte tails
        want = partition_for(cid, PARTITIONS) % N
        for path in (f"/v1/conversations/{cid}", f"/v1/conversations/{cid}/messages?x=1"):
            assert get(edge, path).json()["gateway"] == want, path
    cid = ids[0]
    encoded = cid.replace("-", "%2D")  # as a client may send it: the gateway decodes it, so does the rule
    assert get(edge, f"/v1/conversations/{encoded}").json()["gateway"] == partition_for(cid, PARTITIONS) % N


def test_a_resume_goes_to_the_owner_of_its_cursors_partition(edge: Edge) -> None:
    for p in range(PARTITIONS):
        assert get(edge, "/v1/messages/m/stream", headers={"Last-Event-ID": f"{p}:1234"}).json()["gateway"] == p % N
        assert get(edge, f"/v1/messages/m/stream?last_event_id={p}%3A-1").json()["gateway"] == p % N


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/v1/messages/m/stream", {"Last-Event-ID": f"{PARTITIONS}:5"}),  # not a partition of the topic
     ("/v1/messages/m/stream", {"Last-Event-ID": "garbage"}),  # the gateway answers it (400)
     ("/v1/messages/m/stream", {}), ("/v1/messages/m/regenerate", {"Last-Event-ID": "5:5"}),
     ("/v1/chat/completions", {}), ("/v1/conversations", {}), ("/v1/models", {})],
)  # fmt: skip
def test_requests_that_name_no_partition_go_round_robin(edge: Edge, path: str, headers: dict[str, str]) -> None:
    before = edge.backend_requests("any")
    assert get(edge, path, headers=headers).status_code == 200
    assert edge.backend_requests("any") == before + 1


def test_the_edge_says_who_the_client_is_and_drops_hop_by_hop_headers(edge: Edge) -> None:
    sent = {
        "X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https", "Forwarded": "for=6.6.6.6",
        "X-Parley-Route": "reroute", "Connection": "X-Secret", "X-Secret": "1", "Keep-Alive": "timeout=5",
        "TE": "trailers", "Proxy-Authorization": "Basic eA==", "Authorization": "Bearer k",
    }  # fmt: skip
    seen = get(edge, "/v1/models", headers=sent).json()["headers"]
    assert seen["x-forwarded-for"] == "127.0.0.1" and seen["x-forwarded-proto"] == "http"
    for dropped in ("forwarded", "x-parley-route", "connection", "x-secret", "keep-alive", "te", "proxy-authorization"):
        assert dropped not in seen, dropped
    assert seen["authorization"] == "Bearer k"


def test_bodies_over_their_routes_limit_are_refused_at_the_edge(edge: Edge) -> None:
    upload = 5000 + FORM_OVERHEAD  # PARLEY_DOCUMENTS_MAX_BYTES and the multipart framing around the file
    assert httpx.post(edge.url + "/v1/documents", content=b"x" * upload, timeout=10).json()["body"] == upload
    refused = httpx.post(edge.url + "/v1/documents", content=b"x" * (upload + 1), timeout=10)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "too_large"
    assert httpx.post(edge.url + "/v1/conversations", content=b"x" * 1000, timeout=10).json()["body"] == 1000
    for path in ("/v1/conversations", "/v1/documents/d"):  # only the upload route takes the documents limit
        refused = httpx.post(edge.url + path, content=b"x" * 1001, timeout=10)
        assert refused.status_code == 413 and refused.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("path", ["/metrics", "/metrics?x=1", "//metrics", "/%6detrics", "/metrics/"])
def test_gateway_metrics_are_not_reachable_through_the_edge(edge: Edge, path: str) -> None:
    head, body = raw(edge, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())  # as written
    assert head.startswith(b"HTTP/1.1 404") and json.loads(body)["error"]["code"] == "not_found", head


def test_methods_the_api_does_not_have_are_refused(edge: Edge) -> None:
    for method in ("TRACE", "PROPFIND"):
        response = httpx.request(method, edge.url + "/v1/models", timeout=10)
        assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed", method
    head, body = raw(edge, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405") and json.loads(body)["error"]["code"] == "method_not_allowed"


def test_the_edges_own_readiness(edge: Edge) -> None:
    ready = get(edge, "/edge/readyz")
    assert ready.status_code == 200 and ready.json() == {"ready": True, "gateways_up": N}


def test_sse_over_tls_and_http2_arrives_event_by_event(tmp_path: Path) -> None:
    """curl speaks HTTP/2 (infra/local/debian-packages.sh); it prints each event as it arrives (-N)."""
    cert, key = self_signed(tmp_path)
    edge, process = start_edge(tmp_path, {"PARLEY_EDGE_TLS_CERT": str(cert), "PARLEY_EDGE_TLS_KEY": str(key)})
    try:
        curl = subprocess.Popen(
            ["curl", "-sN", "--http2", "-k", "-w", "\nhttp_version=%{http_version}\n", f"{edge.url}/v1/stream"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert curl.stdout is not None
        first = [curl.stdout.readline() for _ in range(3)]
        assert first == ["id: 0:1\n", "event: delta\n", 'data: {"n": 1}\n'], first
        for server in edge.servers:  # the first event came through alone: now the gateway sends the second
            server.seen_first.set()  # type: ignore[attr-defined]
        rest, _ = curl.communicate(timeout=30)
        assert 'data: {"n": 2}' in rest and "http_version=2" in rest, rest
    finally:
        process.terminate()
        process.wait(10)
        for server in edge.servers:
            server.shutdown()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, in two PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = tmp_path / "edge.crt", tmp_path / "edge.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_a_request_haproxy_cannot_frame_is_refused_and_its_connection_closed(edge: Edge) -> None:
    # HAProxy 2.6 (Debian 12) answers a parse error with its own HTML page: errorfile and http-error do not
    # reach errors of its HTTP/1 parser before 3.2 (haproxy/haproxy#3032). Such a request is no API call.
    head, _ = raw(edge, b"POST /v1/conversations HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello")
    assert head.startswith(b"HTTP/1.1 400") and b"connection: close" in head.lower(), head


def test_a_gateway_running_as_another_shard_than_its_place_is_logged(edge: Edge) -> None:
    assert "another shard" not in edge.log.read_text(), "every stand-in says the shard its place gives it"
    edge.servers[2].claims = "3/4"  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 30
        while "another shard" not in edge.log.read_text():
            assert time.monotonic() < deadline, edge.log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        edge.servers[2].claims = "2/4"  # type: ignore[attr-defined]
    line = next(json.loads(x) for x in edge.log.read_text().splitlines() if "another shard" in x)
    assert (line["gateway"], line["shard"], line["expected"], line["level"]) == (2, "3/4", "2/4", "error")
