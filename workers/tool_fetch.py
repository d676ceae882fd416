"""The built-in ``fetch_url``: GET one http(s) URL for the model and give back its text, never reaching a
network the operator has not opened.

The model chooses the URL, and a page can choose where it redirects, so either may aim at the machine's own
services (a metadata endpoint, Kafka's admin port, a neighbour in the VPC). Each hop is guarded whole:

- http or https only, no ``user:pass@`` (credentials have no business in a model's URL);
- the host's every address must be globally routable or in the operator's ``fetch.allow_networks``, and the
  connection goes to the address that was checked, never to the name again (workers/net_guard.py);
- redirects are followed by hand, at most ``max_redirects``, each through the same guard.

One deadline covers the whole fetch, redirects included; the body is streamed and cut at ``max_bytes``
(decoded bytes, so a compressed body cannot expand past it). Only text is read: ``text/*``, JSON and XML
(HTML as its readable text); anything else is refused before its body is read. Neither the URL nor the page
is ever logged, and error texts name the rule, never the URL.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any

import httpx
from lxml.etree import LxmlError

from documents.formats.html import segments
from workers.net_guard import Network, Refused, Resolver, allowed_addresses, system_resolver
from workers.tool_runners import ToolResult, clipped

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML = frozenset({"text/html", "application/xhtml+xml"})
_TEXT = frozenset({"application/json", "application/xml"})
_ACCEPT = "text/html, text/*;q=0.9, application/json;q=0.9, application/xml;q=0.9"


def checked_url(raw: str) -> httpx.URL:
    """``raw`` as an http(s) URL with a host and no credentials."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError, UnicodeError) as exc:
        raise Refused("the URL is not a valid URL") from exc
    if url.scheme not in ("http", "https"):
        raise Refused("only http and https URLs are fetched")
    if url.userinfo:
        raise Refused("a URL with credentials (user:password@) is refused")
    if not url.raw_host:
        raise Refused("the URL has no host")
    return url


class UrlFetcher:
    """The ``fetch_url`` runner (workers/tool_runners.py's ``Runner``): arguments ``{"url": ...}``."""

    def __init__(
        self,
        allow_networks: Sequence[Network] = (),
        max_bytes: int = 1_000_000,
        timeout_s: float = 10.0,
        max_redirects: int = 3,
        resolver: Resolver = system_resolver,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._allow = tuple(allow_networks)
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._max_redirects = max_redirects
        self._resolve = resolver
        self._ssl = ssl_context or httpx.create_ssl_context()

    async def run(self, arguments: dict[str, Any], idempotency_key: str) -> ToolResult:
        # A failed fetch is an answer ("error"), never NotSent or OutcomeUnknown: a GET changes nothing, so
        # whether it reached the server does not matter, and the model may simply ask again. The call id is
        # not sent: it means nothing to a web server.
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._fetch(arguments.get("url"))
        except Refused as exc:
            return ToolResult("error", "", str(exc))
        except TimeoutError:
            return ToolResult("error", "", f"the fetch took longer than {self._timeout_s:g} s: TimeoutError")
        except (httpx.HTTPError, httpx.InvalidURL, OSError, UnicodeError) as exc:
            # The class only: messages of httpx and the resolver may quote the URL or the host.
            return ToolResult("error", "", f"the fetch failed: {type(exc).__name__}")

    async def _fetch(self, raw: Any) -> ToolResult:
        if not isinstance(raw, str):
            raise Refused("the url argument must be a string")
        url = checked_url(raw)
        for _ in range(self._max_redirects + 1):
            answer = await self._hop(url, await self._guard(url))
            if isinstance(answer, ToolResult):
                return answer
            url = answer
        raise Refused(f"the page redirected more than {self._max_redirects} times")

    async def _guard(self, url: httpx.URL) -> list[str]:
        """The addresses ``url``'s host resolves to, all of them allowed; else Refused."""
        port = url.port or (443 if url.scheme == "https" else 80)
        return await allowed_addresses(url.raw_host.decode("ascii"), port, self._allow, self._resolve)

    async def _hop(self, url: httpx.URL, addresses: list[str]) -> ToolResult | httpx.URL:
        """GET ``url`` from the first of its checked ``addresses`` that takes a connection: the result, or
        where it redirects to."""
        failure: httpx.ConnectError | None = None
        for address in addresses:
            try:
                return await self._get(url, address)
            except httpx.ConnectError as exc:  # that address is down: another of the name's may not be
                failure = exc
        assert failure is not None
        raise failure

    async def _get(self, url: httpx.URL, address: str) -> ToolResult | httpx.URL:
        host = url.raw_host.decode("ascii")
        request = httpx.Request(
            "GET",
            url.copy_with(host=address, fragment=None),
            headers={
                "Host": url.netloc.decode("ascii"),
                "Accept": _ACCEPT,
                # Asked plain: a compressed body could expand a thousandfold before the size limit sees it.
                "Accept-Encoding": "identity",
                "User-Agent": "Parley fetch_url",
            },
            extensions={"sni_hostname": host, "timeout": httpx.Timeout(self._timeout_s).as_dict()},
        )
        # The transport alone, not a client: no cookies, credentials, proxies or .netrc, nothing carried
        # from one hop to the next, and none of the client's log lines, which quote the URL.
        async with httpx.AsyncHTTPTransport(verify=self._ssl, trust_env=False) as transport:
            response = await transport.handle_async_request(request)
            try:
                return await self._answer(url, response)
            finally:
                await response.aclose()

    async def _answer(self, url: httpx.URL, response: httpx.Response) -> ToolResult | httpx.URL:
        status = response.status_code
        if status in _REDIRECTS:
            location = response.headers.get("Location")
            if not location:
                return ToolResult("error", "", f"the server answered HTTP {status} with no Location")
            try:
                return checked_url(str(url.join(location)))
            except httpx.InvalidURL as exc:
                raise Refused("the redirect's Location is not a valid URL") from exc
        if not response.is_success:
            return ToolResult("error", "", f"the server answered HTTP {status}")
        media = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if not (media.startswith("text/") or media in _TEXT or media in _HTML):
            # The type is not quoted: it is the server's words.
            raise Refused("the content is not text (fetch_url reads text, HTML, JSON and XML)")
        body, cut = await _read(response, self._max_bytes)
        text = _decoded(body, response.charset_encoding)
        if media in _HTML:
            text = await asyncio.to_thread(_readable, text)  # off the loop: a big page takes a while
        text = clipped(text)
        if cut:
            text += f"\n[cut: the page is longer than {self._max_bytes} bytes; the rest was not read]"
        return ToolResult("ok", text)


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The body's first ``limit`` bytes, and whether there was more (left unread)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False


def _decoded(body: bytes, charset: str | None) -> str:
    # "replace": a cut body may end inside a character, and a page may lie about its charset.
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _readable(html: str) -> str:
    """HTML's readable text, by the reader uploaded pages go through (documents/formats/html.py, lxml):
    scripts, styles and navigation dropped, the main content's headings, paragraphs and tables kept."""
    try:
        blocks = segments(html.encode("utf-8"))[0]
    except LxmlError:  # nothing lxml can call a document (an empty or comment-only page)
        return ""
    return "\n\n".join(block.text for block in blocks)
