"""Signing in to the web page in a real Chromium: an HttpOnly session cookie and nothing in storage, sign-out
that ends the session on the server, a session that ends idle (the draft kept), CSRF attempts refused with
nothing changed, a page that works under its Content-Security-Policy, straight and through the edge, and
sign-in with an organisation's OpenID provider (a real one: oidc-provider on node)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from gateway.security_headers import CONTENT_SECURITY_POLICY
from gateway.sessions import COOKIE
from infra.local.settings import LocalInfraSettings
from parley.settings import from_env
from parley.users import create_org
from tests.browser.chat import Chat
from tests.browser.conftest import Account, WebStack
from tests.fixtures import oidc_provider
from tools import isolated
from tools.supervisor import free_port

#: The short-idle gateway's PARLEY_SESSION_IDLE_S.
IDLE_S = 3
#: Collects every CSP violation the page reports, from before its first script runs.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push({directive: e.violatedDirective, blocked: e.blockedURI}));
"""


@pytest.fixture(scope="module")
def short_idle_url(web_stack: WebStack) -> Iterator[str]:
    """A second gateway of the stack whose sessions end after IDLE_S seconds unused."""
    child, url = isolated.add_gateway(web_stack.inner, "gateway-short-idle", extra_env={"PARLEY_SESSION_IDLE_S": str(IDLE_S)})
    yield url
    web_stack.inner.supervisor.stop(child)


@pytest.fixture(scope="module")
def edge_url(web_stack: WebStack) -> Iterator[str]:
    """The edge in front of the stack's gateway."""
    child, url = isolated.add_edge(web_stack.inner, [web_stack.url], name="edge-sign-in")
    yield url
    web_stack.inner.supervisor.stop(child)


@dataclass(frozen=True)
class OidcGateway:
    url: str  # a gateway of the stack that signs people in with the provider too
    org_id: str  # PARLEY_OIDC_ORG: where the provider's people become members
    issuer: str  # the provider's


@pytest.fixture(scope="module")
def oidc_gateway(web_stack: WebStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcGateway]:
    home = oidc_provider.install(from_env(LocalInfraSettings).data_dir)
    port, org_id = free_port(), create_org(web_stack.inner.session, "Acme")  # type: ignore[arg-type]
    oidc_env = {
        "PARLEY_OIDC_ISSUER": f"http://127.0.0.1:{port}",
        "PARLEY_OIDC_CLIENT_ID": "parley-web",
        "PARLEY_OIDC_CLIENT_SECRET": "a secret of the test's",
        "PARLEY_OIDC_ORG": org_id,
    }
    child, url = isolated.add_gateway(web_stack.inner, "gateway-oidc", extra_env=oidc_env)
    log = tmp_path_factory.mktemp("oidc") / "provider.log"
    provider = oidc_provider.start(home, port, "parley-web", "a secret of the test's", f"{url}/v1/auth/oidc/callback", log)
    yield OidcGateway(url, org_id, provider.issuer)
    provider.stop()
    web_stack.inner.supervisor.stop(child)


def signed_in(page: Page, url: str, account: Account) -> Chat:
    chat = Chat(page, url).open().sign_in(account)
    chat.signed_in()
    return chat


def session_cookie(page: Page) -> dict[str, Any]:
    cookies = [c for c in page.context.cookies() if c["name"] == COOKIE]
    assert len(cookies) == 1, page.context.cookies()
    return dict(cookies[0])


def stored(page: Page) -> str:
    """Everything in the page's localStorage and sessionStorage, as one string."""
    value: Any = page.evaluate("JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])")
    return str(value)


def test_sign_in_keeps_the_session_in_an_httponly_cookie_and_sign_out_ends_it(page: Page, web_stack: WebStack) -> None:
    chat = Chat(page, web_stack.url).open()
    expect(page.get_by_label("API key")).to_have_count(0)  # the page no longer asks for one
    chat.sign_in(Account(web_stack.account.email, "not the password"))
    expect(page.get_by_role("alert").filter(has_text="not accepted")).to_be_visible()
    expect(page.get_by_label("Password", exact=True)).to_have_value("")
    chat.sign_in(web_stack.account)
    chat.signed_in()

    cookie = session_cookie(page)
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert page.evaluate("document.cookie") == "", "no script of the page can read the session"
    kept = stored(page)
    assert web_stack.account.password not in kept and cookie["value"] not in kept
    assert web_stack.api_key not in kept and "csrf" not in kept.lower()

    page.reload()  # the cookie's session goes on in a new load of the page
    chat.signed_in()
    page.get_by_role("button", name="Sign out", exact=True).click()
    expect(page.get_by_label("Email", exact=True)).to_be_visible()
    assert not [c for c in page.context.cookies() if c["name"] == COOKIE]
    # Ended on the server too: the cookie, had someone copied it, opens nothing.
    copied = httpx.get(f"{web_stack.url}/v1/auth/session", cookies={COOKIE: cookie["value"]}, timeout=30)
    assert copied.status_code == 401
    page.reload()
    expect(page.get_by_label("Email", exact=True)).to_be_visible()


def test_an_idle_session_ends_and_signing_in_again_keeps_the_draft(page: Page, web_stack: WebStack, short_idle_url: str) -> None:
    chat = signed_in(page, short_idle_url, web_stack.account)
    box = page.get_by_label("Message", exact=True)
    box.fill("A draft written slowly")
    page.wait_for_timeout((IDLE_S + 1.5) * 1000)
    box.press("Enter")  # the first request after the idle time finds the session over
    expect(page.get_by_role("alert").filter(has_text="session has ended")).to_be_visible()
    expect(page.get_by_label("Email", exact=True)).to_have_value(web_stack.account.email)
    chat.sign_in(web_stack.account)
    chat.signed_in()
    expect(box).to_have_value("A draft written slowly")


def test_csrf_attempts_are_refused_and_change_nothing(page: Page, web_stack: WebStack) -> None:
    """A page of another origin on the same site (the cookie goes along: SameSite does not stop it) posts a
    form to the API; the page's own origin sends a write without the CSRF token. Both get 403."""
    signed_in(page, web_stack.url, web_stack.account)
    before = web_stack.http.get("/v1/conversations").json()["conversations"]
    evil = "http://127.0.0.1:9/prize.html"  # same site as the gateway (ports do not count), another origin
    form = f"""<form method="POST" action="{web_stack.url}/v1/conversations" enctype="text/plain">
      <input name='{{"title": "pwned", "x": "' value='"}}'><button>Claim your prize</button></form>"""
    page.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=form))
    page.goto(evil)
    with page.expect_response(f"{web_stack.url}/v1/conversations") as answer:
        page.get_by_role("button", name="Claim your prize").click()
    response = answer.value
    assert response.status == 403, response.text()
    assert json.loads(response.text())["error"]["code"] == "csrf_failed"
    assert f"{COOKIE}=" in response.request.all_headers().get("cookie", ""), "the cookie went along: the token stopped it"

    Chat(page, web_stack.url).open().signed_in()
    tokenless: Any = page.evaluate(
        """async () => {
          const r = await fetch('/v1/conversations', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{"title": "pwned"}'});
          return [r.status, await r.json()];
        }"""
    )
    assert tokenless[0] == 403 and tokenless[1]["error"]["code"] == "csrf_failed"
    after = web_stack.http.get("/v1/conversations").json()["conversations"]
    assert after == before and not any(c.get("title") == "pwned" for c in after)


@pytest.mark.parametrize("through", ["gateway", "edge"])
def test_the_page_works_under_its_content_security_policy(page: Page, web_stack: WebStack, edge_url: str, through: str) -> None:
    url = web_stack.url if through == "gateway" else edge_url
    page.add_init_script(RECORD_VIOLATIONS)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    response = page.goto(url + "/")
    assert response is not None
    headers = response.headers
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
    assert "strict-transport-security" not in headers  # plain HTTP here: PARLEY_GATEWAY_HSTS_S is 0
    chat = Chat(page, url).sign_in(web_stack.account)
    chat.signed_in()
    chat.send("Hello under a strict policy")
    chat.finished(chat.streaming_reply())
    toggle = page.locator("#archived-toggle")
    toggle.click()  # lists drawn by script, twice
    expect(toggle).to_have_attribute("aria-pressed", "true")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(chat.sidebar.get_by_role("link").first).to_be_visible()
    assert page.evaluate("window.__violations") == [], console
    assert not [line for line in console if "Content Security Policy" in line], console

    # An injected inline script does not run, and the browser says why.
    page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.__ran = true'; document.body.append(s); }")
    page.wait_for_function("window.__violations.length > 0")
    assert page.evaluate("window.__ran") is None
    assert page.evaluate("window.__violations[0].directive").startswith("script-src")


def whoami(page: Page) -> dict[str, Any]:
    answer: Any = page.evaluate("async () => (await fetch('/v1/auth/session')).json()")
    return dict(answer)


def test_sign_in_with_the_organisations_provider(page: Page, web_stack: WebStack, oidc_gateway: OidcGateway) -> None:
    chat = Chat(page, oidc_gateway.url).open()
    expect(page.get_by_label("Email", exact=True)).to_be_visible()
    with page.expect_request(lambda r: r.url.startswith(f"{oidc_gateway.url}/v1/auth/oidc/callback")) as back:
        page.get_by_role("link", name="Sign in with your organisation").click()
        page.get_by_placeholder("Enter any login").fill("alice")  # the provider's own pages from here
        page.get_by_placeholder("and password").fill("anything")
        page.get_by_role("button", name="Sign-in").click()
        page.get_by_role("button", name="Continue").click()
    assert "code=" in back.value.url and "state=" in back.value.url
    chat.signed_in()
    assert page.url.rstrip("/") == oidc_gateway.url  # landed on the page, no code or state left in the address
    first = whoami(page)
    assert first["org_id"] == oidc_gateway.org_id and first["role"] == "member"
    user = web_stack.inner.session.execute("SELECT name, org_id FROM users WHERE user_id = %s", (first["user_id"],)).one()  # type: ignore[attr-defined]
    assert user.name == "Person alice" and user.org_id == oidc_gateway.org_id
    cookie = session_cookie(page)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert not [c for c in page.context.cookies() if c["name"] == "__Host-parley_oidc"], "a flow's cookie is used once"

    # A second sign-in of the same person is the same user.
    page.get_by_role("button", name="Sign out", exact=True).click()
    page.get_by_role("link", name="Sign in with your organisation").click()
    # Signed in at the provider already: it may ask for consent again, or send the browser straight back.
    page.wait_for_url(re.compile(f"^({re.escape(oidc_gateway.url)}/$|{re.escape(oidc_gateway.issuer)}/interaction/)"))
    if page.url.startswith(oidc_gateway.issuer):
        page.get_by_role("button", name="Continue").click()
    chat.signed_in()
    assert whoami(page)["user_id"] == first["user_id"]


def test_an_answer_that_is_not_this_browsers_flow_signs_no_one_in(page: Page, oidc_gateway: OidcGateway) -> None:
    Chat(page, oidc_gateway.url).open()
    page.goto(f"{oidc_gateway.url}/v1/auth/oidc/callback?code=stolen&state=someone-elses")
    expect(page.get_by_role("alert").filter(has_text="organisation did not work")).to_be_visible()
    assert "sign_in=failed" not in page.url
    assert not [c for c in page.context.cookies() if c["name"] == COOKIE]
