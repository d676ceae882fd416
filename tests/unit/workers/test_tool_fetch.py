"""fetch_url against a real local HTTP(S) server: the SSRF guard, address pinning, redirects, limits, content."""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from workers.net_guard import refusal
from workers.tool_fetch import UrlFetcher

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
ONLY_127_0_0_1 = (ipaddress.ip_network("127.0.0.1/32"),)
HTML = b"""<html><head><title>T</title><script>var secret = "from the script";</script>
<style>p { color: red }</style></head>
<body><nav>Home | About</nav><main><h1>The heading</h1><p>A paragraph of the page.</p></main></body></html>"""


class Handler(BaseHTTPRequestHandler):
    seen: list[str] = []  # paths asked for, in order

    def do_GET(self) -> None:
        Handler.seen.append(self.path)
        path = self.path.split("?")[0]
        port = self.server.server_address[1]
        if path == "/text":
            self._send(200, "text/plain; charset=utf-8", "hello from the test server".encode())
        elif path == "/host":
            self._send(200, "text/plain", self.headers["Host"].encode())
        elif path == "/page":
            self._send(200, "text/html", HTML)
        elif path == "/json":
            self._send(200, "application/json", b'{"a": [1, 2]}')
        elif path == "/big":
            self._send(200, "text/plain", b"x" * 50_000)
        elif path == "/binary":
            self._send(200, "application/octet-stream", b"\x00\x01" * 1000)
        elif path == "/missing":
            self._send(404, "text/plain", b"no such page")
        elif path == "/redirect":
            self._redirect("/text")
        elif path == "/redirect-away":  # to an address the tests allow only when they mean to
            self._redirect(f"http://127.0.0.2:{port}/text")
        elif path == "/redirect-ftp":
            self._redirect("ftp://example.com/file")
        elif path == "/loop":
            self._redirect("/loop")
        elif path == "/slow":
            time.sleep(1.0)
            self._send(200, "text/plain", b"late")
        elif path == "/drip":  # each byte well within a read timeout; the whole far past the deadline
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "30")
            self.end_headers()
            for _ in range(30):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):  # the fetcher left early, as it may
            pass


def _serve(server: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    yield from _serve(ThreadingHTTPServer(("127.0.0.1", 0), Handler))


def _certificate(name: str) -> tuple[bytes, bytes]:
    """A self-signed certificate for ``name`` alone (no IP address in it), and its key, as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, ssl.SSLContext]]:
    """An https server whose certificate names public.test only, and a client context that trusts it."""
    cert, key = _certificate("public.test")
    directory = tmp_path_factory.mktemp("tls")
    (directory / "cert.pem").write_bytes(cert)
    (directory / "key.pem").write_bytes(key)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = server_context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    client_context = ssl.create_default_context(cadata=cert.decode())
    for tls_port in _serve(server):
        yield tls_port, client_context


def resolving(answers: dict[str, Sequence[str]], asked: list[str] | None = None):
    """A resolver that answers from ``answers`` (one list per name) and notes each name asked."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if asked is not None:
            asked.append(host)
        return answers[host]

    return resolve


# The guard, address by address: no network.


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the clouds' metadata endpoint
        ("100.64.0.1", "shared address space"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("192.0.0.8", "not globally routable"),  # Python 3.11 calls it global
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("fc00::1", "private"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
    ],
)
def test_addresses_outside_the_public_internet_are_refused_by_rule(address: str, rule: str) -> None:
    reason = refusal(ipaddress.ip_address(address))
    assert reason is not None and rule in reason


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"]
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_the_operators_networks_are_let_through_and_only_those() -> None:
    assert refusal(ipaddress.ip_address("127.0.0.1"), LOOPBACK) is None
    assert refusal(ipaddress.ip_address("::ffff:127.0.0.1"), LOOPBACK) is None
    assert refusal(ipaddress.ip_address("10.0.0.1"), LOOPBACK) == "the address is in a private network"
    assert refusal(ipaddress.ip_address("127.0.0.2"), ONLY_127_0_0_1) == "the address is loopback"


# URLs refused before any lookup.


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("ftp://example.com/file", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("http://user:pw@example.com/", "credentials"),
        ("http:///path", "no host"),
        ("http://[not-an-address]/", "not a valid URL"),
    ],
)
async def test_urls_that_are_not_plain_http_are_refused_unresolved(url: str, rule: str) -> None:
    asked: list[str] = []
    result = await UrlFetcher(resolver=resolving({}, asked)).run({"url": url}, "call-1")
    assert (result.outcome, result.text) == ("error", "")
    assert rule in result.error and url not in result.error
    assert asked == []


# Against the local server.


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "[::ffff:127.0.0.1]"])
async def test_loopback_is_refused_by_default_and_nothing_is_sent(port: int, host: str) -> None:
    Handler.seen.clear()
    result = await UrlFetcher().run({"url": f"http://{host}:{port}/text?token=s3cret"}, "call-1")
    assert (result.outcome, result.text, result.error) == ("error", "", "the address is loopback")
    assert Handler.seen == []


async def test_a_url_that_is_not_a_string_is_refused() -> None:
    result = await UrlFetcher().run({"url": 5}, "call-1")
    assert (result.outcome, result.error) == ("error", "the url argument must be a string")


async def test_an_allowed_network_is_fetched(port: int) -> None:
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/text"}, "call-1")
    assert result.outcome == "ok" and result.text == "hello from the test server"


async def test_html_is_read_as_its_text_without_scripts(port: int) -> None:
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/page"}, "call-1")
    assert result.outcome == "ok"
    assert result.text == "The heading\n\nA paragraph of the page."


async def test_json_is_read_as_it_is(port: int) -> None:
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/json"}, "call-1")
    assert result.outcome == "ok" and json.loads(result.text) == {"a": [1, 2]}


async def test_a_body_past_max_bytes_is_cut_and_says_so(port: int) -> None:
    result = await UrlFetcher(LOOPBACK, max_bytes=1000).run({"url": f"http://127.0.0.1:{port}/big"}, "call-1")
    assert result.outcome == "ok"
    assert result.text.startswith("x" * 1000 + "\n[cut: the page is longer than 1000 bytes")
    assert result.text.count("x") == 1000


async def test_other_content_types_are_refused(port: int) -> None:
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/binary"}, "call-1")
    assert (result.outcome, result.text) == ("error", "")
    assert "not text" in result.error


async def test_an_http_error_is_an_error_naming_the_status(port: int) -> None:
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/missing"}, "call-1")
    assert (result.outcome, result.error) == ("error", "the server answered HTTP 404")


async def test_a_redirect_is_followed_through_the_guard(port: int) -> None:
    Handler.seen.clear()
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/redirect"}, "call-1")
    assert result.outcome == "ok" and result.text == "hello from the test server"
    assert Handler.seen == ["/redirect", "/text"]


async def test_a_redirect_out_of_the_allowed_network_is_refused(port: int) -> None:
    # The first host is allowed (127.0.0.1/32); where it redirects (127.0.0.2) is not.
    result = await UrlFetcher(ONLY_127_0_0_1).run({"url": f"http://127.0.0.1:{port}/redirect-away"}, "call-1")
    assert (result.outcome, result.error) == ("error", "the address is loopback")
    # With 127.0.0.0/8 allowed the guard lets the hop through, and the connection is tried: nothing listens
    # on 127.0.0.2, so it is refused there.
    allowed = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/redirect-away"}, "call-1")
    assert (allowed.outcome, allowed.error) == ("error", "the fetch failed: ConnectError")


async def test_a_redirect_to_another_scheme_is_refused(port: int) -> None:
    result = await UrlFetcher(LOOPBACK).run({"url": f"http://127.0.0.1:{port}/redirect-ftp"}, "call-1")
    assert (result.outcome, result.error) == ("error", "only http and https URLs are fetched")


async def test_redirects_past_the_limit_are_refused(port: int) -> None:
    Handler.seen.clear()
    result = await UrlFetcher(LOOPBACK, max_redirects=2).run({"url": f"http://127.0.0.1:{port}/loop"}, "call-1")
    assert (result.outcome, result.error) == ("error", "the page redirected more than 2 times")
    assert Handler.seen == ["/loop"] * 3


async def test_a_slow_server_times_out(port: int) -> None:
    started = time.monotonic()
    result = await UrlFetcher(LOOPBACK, timeout_s=0.3).run({"url": f"http://127.0.0.1:{port}/slow"}, "call-1")
    assert result.outcome == "error" and result.error.endswith(("TimeoutError", "ReadTimeout"))
    assert time.monotonic() - started < 0.9


async def test_the_deadline_covers_the_whole_fetch_not_each_read(port: int) -> None:
    started = time.monotonic()
    result = await UrlFetcher(LOOPBACK, timeout_s=0.5).run({"url": f"http://127.0.0.1:{port}/drip"}, "call-1")
    assert (result.outcome, result.error) == ("error", "the fetch took longer than 0.5 s: TimeoutError")
    assert time.monotonic() - started < 1.5


# DNS: every answer checked, and the connection made to the checked address.


async def test_a_public_looking_name_that_resolves_privately_is_refused() -> None:
    for answer in (["10.0.0.1"], ["93.184.216.34", "169.254.169.254"]):
        fetcher = UrlFetcher(resolver=resolving({"public.test": answer}))
        result = await fetcher.run({"url": "http://public.test/"}, "call-1")
        assert result.outcome == "error" and result.error.startswith("the address is")


async def test_the_connection_goes_to_the_checked_address_not_a_second_lookup(port: int) -> None:
    # public.test resolves nowhere but in this resolver, which answers once with an allowed address and
    # then with a private one (a rebinding name). One lookup, and the page came from the first address.
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> Sequence[str]:
        asked.append(host)
        return ["127.0.0.1"] if len(asked) == 1 else ["10.0.0.1"]

    fetcher = UrlFetcher(ONLY_127_0_0_1, resolver=rebinding)
    result = await fetcher.run({"url": f"http://public.test:{port}/host"}, "call-1")
    assert (result.outcome, result.text) == ("ok", f"public.test:{port}")  # the name went as Host
    assert asked == ["public.test"]


async def test_https_is_pinned_and_verified_against_the_name(tls: tuple[int, ssl.SSLContext]) -> None:
    tls_port, trusting = tls
    resolver = resolving({"public.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    fetcher = UrlFetcher(LOOPBACK, resolver=resolver, ssl_context=trusting)
    # The certificate names public.test only: verified against the address, this would fail.
    result = await fetcher.run({"url": f"https://public.test:{tls_port}/host"}, "call-1")
    assert (result.outcome, result.text) == ("ok", f"public.test:{tls_port}")
    # Same address, another name: the certificate does not match it.
    wrong = await fetcher.run({"url": f"https://other.test:{tls_port}/host"}, "call-1")
    assert (wrong.outcome, wrong.error) == ("error", "the fetch failed: ConnectError")


async def test_nothing_of_the_url_or_page_is_logged(port: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fetcher = UrlFetcher(LOOPBACK, resolver=resolving({"public.test": ["127.0.0.1"]}))
    result = await fetcher.run({"url": f"http://public.test:{port}/page?token=s3cret"}, "call-1")
    assert result.outcome == "ok"
    assert not any(s in caplog.text for s in ("public.test", "s3cret", "/page", "paragraph", "secret"))
