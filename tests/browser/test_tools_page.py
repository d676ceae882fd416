"""Parley's own tools in the page (DESIGN.md §13): each call a reply makes is a card under that reply (the tool,
its arguments, the permission check's decision and rule, then its outcome and result), and a call the broker
asks about waits for the owner's Approve, Edit or Reject on the card.

The stack's one tool (conftest.py's, served by tests/e2e/tool_service.py) is named by no rule, so every call is asked. The model's
calls are scripted (the synthetic engine's ``[[reply:…]]``) and the tool's answer scripts the reply after it.
Every answer here is given after a reload (once from a second browser): a card is the API's, not the page's
memory.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from playwright.sync_api import Locator, Page, expect

from tests.browser.chat import Chat
from tests.browser.conftest import TOOL, WAIT_MS, WebStack
from tests.e2e.tool_service import Effects, scripted

#: Seconds, for what the test reads through the API itself.
WAIT_S = WAIT_MS / 1000


def calling(amount: int, item: str) -> str:
    """A user message whose reply is the model calling the tool (Hermes markup, the synthetic pool's format)."""
    call = {"name": TOOL, "arguments": {"amount": amount, "item": item}}
    return scripted(f"<tool_call>\n{json.dumps(call)}\n</tool_call>\n")


def eventually(check: Any, what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def tool_calls(web_stack: WebStack, cid: str) -> list[dict[str, Any]]:
    response = web_stack.http.get(f"/v1/conversations/{cid}/tool-calls")
    response.raise_for_status()
    return list(response.json()["tool_calls"])


def call_in(web_stack: WebStack, cid: str, **wanted: str) -> dict[str, Any]:
    """The conversation's first call whose fields have the ``wanted`` values, once it has."""

    def found() -> dict[str, Any] | None:
        return next((c for c in tool_calls(web_stack, cid) if all(c[k] == v for k, v in wanted.items())), None)

    return eventually(found, f"a tool call with {wanted}")


def post_turn(web_stack: WebStack, content: str) -> str:
    """A new chat whose first message, posted through the API, offers the tool; its id once the reply has ended."""
    created = web_stack.http.post("/v1/conversations", json={})
    created.raise_for_status()
    cid = created.json()["id"]
    body = {"content": content, "client_message_id": uuid.uuid4().hex, "tools": [TOOL]}
    response = web_stack.http.post(f"/v1/conversations/{cid}/messages", json=body, timeout=WAIT_S)
    response.raise_for_status()
    assert "event: done" in response.text, response.text[-500:]
    return str(cid)


def open_chat(page: Page, web_stack: WebStack, cid: str) -> Chat:
    chat = Chat(page, web_stack.url)
    page.goto(f"{web_stack.url}/#/c/{cid}")
    chat.sign_in(web_stack.account)
    chat.signed_in()
    return chat


def card(page: Page, call_id: str) -> Locator:
    return page.locator(f'section.tool-call[data-call-id="{call_id}"]')


def shown_arguments(card: Locator) -> dict[str, Any]:
    text = card.locator(".tool-args").text_content() or ""
    assert "\n  " in text, f"the arguments are not indented JSON: {text!r}"
    return dict(json.loads(text))


def asked(card: Locator) -> None:
    """The card waits for the owner: its decision, rule and the three answers."""
    expect(card).to_have_attribute("data-state", "asked")
    expect(card.locator(".tool-phase")).to_have_text("Waiting for your approval")
    expect(card.locator(".tool-decision")).to_have_text("The permission check asked you (rule: no-rule)")
    for answer in ("Approve", "Reject"):
        expect(card.get_by_role("button", name=f"{answer} {TOOL}", exact=True)).to_be_visible()
    expect(card.get_by_role("button", name=f"Edit the arguments of {TOOL}", exact=True)).to_be_visible()


def test_approve_after_a_reload_runs_the_call_once_and_the_reply_goes_on(page, web_stack, tool_service: Effects, shoot) -> None:
    chat = Chat(page, web_stack.url).open().sign_in(web_stack.account)
    chat.signed_in()
    posts: list[Any] = []
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/messages") and posts.append(r.post_data_json))
    # The composer's Tools field offers the tool with the message.
    page.get_by_role("button", name="Tools", exact=True).click()
    page.get_by_label("Tools to offer", exact=True).fill(TOOL)
    expect(page.get_by_role("button", name="Tools (1)", exact=True)).to_have_attribute("aria-expanded", "true")
    chat.send(calling(500, "laptop"))
    chat.finished(chat.replies.first)
    assert posts and posts[-1]["tools"] == [TOOL]
    cid = chat.conversation_id()
    call = call_in(web_stack, cid, state="asked")
    assert (call["decision"], call["rule"], call["name"]) == ("ask", "no-rule", TOOL)

    shown = card(page, call["id"])
    asked(shown)
    assert shown_arguments(shown) == {"amount": 500, "item": "laptop"}
    assert chat.replies.first.locator("section.tool-call").count() == 1, "the card is under the reply that made the call"
    shoot(page, "tools-asked")

    page.reload()
    chat.signed_in()
    shown = card(page, call["id"])
    asked(shown)
    assert tool_service.effects[call["id"]] == 0, "nothing ran before the approval"
    shown.get_by_role("button", name=f"Approve {TOOL}", exact=True).click()

    expect(chat.replies.last.locator(".body")).to_have_text("Saved laptop for 500.")
    chat.finished(chat.replies.last)
    expect(shown).to_have_attribute("data-outcome", "ok")
    expect(shown.locator(".tool-phase")).to_have_text("Done")
    expect(shown.locator(".tool-result")).to_contain_text('"ok": true')
    expect(shown.get_by_role("button", name=f"Approve {TOOL}", exact=True)).to_have_count(0)
    expect(page.locator("section.tool-call")).to_have_count(1)
    assert call_in(web_stack, cid, outcome="ok")["id"] == call["id"]
    assert tool_service.effects[call["id"]] == 1
    assert tool_service.bodies[call["id"]] == {"amount": 500, "item": "laptop"}
    shoot(page, "tools-approved")


def test_an_edit_from_a_second_browser_runs_the_edited_arguments(page, browser, web_stack, tool_service: Effects) -> None:
    cid = post_turn(web_stack, calling(900, "tv"))
    call = call_in(web_stack, cid, state="asked")
    first = open_chat(page, web_stack, cid)
    asked(card(page, call["id"]))
    page.reload()
    first.signed_in()
    asked(card(page, call["id"]))

    # The same user, signed in in another browser, edits the call there.
    other_context = browser.new_context(viewport={"width": 1200, "height": 800})
    other_context.set_default_timeout(WAIT_MS)
    try:
        other = other_context.new_page()
        second = open_chat(other, web_stack, cid)
        theirs = card(other, call["id"])
        asked(theirs)
        answers: list[Any] = []
        other.on("request", lambda r: r.method == "POST" and "/tool-calls/" in r.url and answers.append(r.post_data_json))
        theirs.get_by_role("button", name=f"Edit the arguments of {TOOL}", exact=True).click()
        field = theirs.get_by_label(f"Arguments of {TOOL}, as a JSON object", exact=True)
        expect(field).to_be_focused()
        assert json.loads(field.input_value()) == {"amount": 900, "item": "tv"}
        run = theirs.get_by_role("button", name="Run with these arguments", exact=True)
        # What is not a JSON object is refused on the page, and nothing is sent.
        for bad, says in (('{"amount": 90, "item": "tv"', "not valid JSON"), ("[90]", "must be a JSON object")):
            field.fill(bad)
            run.click()
            expect(theirs.get_by_role("alert")).to_contain_text(says)
            expect(field).to_have_attribute("aria-invalid", "true")
        assert answers == []
        assert call_in(web_stack, cid, id=call["id"])["state"] == "asked"

        field.fill('{"amount": 90, "item": "tv"}')
        run.click()
        expect(second.replies.last.locator(".body")).to_have_text("Saved tv for 90.")
        assert answers == [{"answer": "edit", "arguments": {"amount": 90, "item": "tv"}}]
        expect(theirs).to_have_attribute("data-outcome", "ok")
        assert shown_arguments(theirs) == {"amount": 90, "item": "tv"}, "the card shows the arguments that ran"
    finally:
        other_context.close()

    assert tool_service.bodies[call["id"]] == {"amount": 90, "item": "tv"}
    assert tool_service.effects[call["id"]] == 1
    # The first browser, reloaded while the call waited, follows the answer given elsewhere.
    mine = card(page, call["id"])
    expect(mine).to_have_attribute("data-outcome", "ok")
    expect(mine.get_by_role("button", name=f"Approve {TOOL}", exact=True)).to_have_count(0)
    expect(first.replies.last.locator(".body")).to_have_text("Saved tv for 90.")
    assert shown_arguments(mine) == {"amount": 90, "item": "tv"}


def test_reject_after_a_reload_never_reaches_the_tool(page, web_stack, tool_service: Effects, shoot) -> None:
    before = tool_service.requests["/expense"]
    cid = post_turn(web_stack, calling(800, "boat"))
    call = call_in(web_stack, cid, state="asked")
    chat = open_chat(page, web_stack, cid)
    asked(card(page, call["id"]))
    page.reload()
    chat.signed_in()
    shown = card(page, call["id"])
    asked(shown)
    shown.get_by_role("button", name=f"Reject {TOOL}", exact=True).click()

    expect(shown).to_have_attribute("data-outcome", "rejected")
    expect(shown.locator(".tool-phase")).to_have_text("Rejected")
    expect(shown.locator(".tool-result")).to_have_text("The user declined this call; it was not made.")
    expect(shown.get_by_role("button", name=f"Approve {TOOL}", exact=True)).to_have_count(0)
    assert call_in(web_stack, cid, id=call["id"])["outcome"] == "rejected"
    # The next reply reads "declined" and, scripted by the first message still, calls the tool again: a new
    # call, judged again, whose card the page shows waiting under that reply.
    again = chat.replies.last.locator('section.tool-call[data-state="asked"]')
    expect(again).to_have_count(1)
    assert again.get_attribute("data-call-id") != call["id"]
    shoot(page, "tools-rejected")
    assert tool_service.effects[call["id"]] == 0
    assert tool_service.requests["/expense"] == before, "a rejected call never reached the tool"


#: A card drawn by the page's own view for calls in states a test cannot easily bring about on the stack: an
#: outcome nobody knows (the executor died mid-call), and a long result.
CARDS = """async () => {
  const { toolCallsView } = await import('/static/view.js');
  const { callsOf } = await import('/static/toolcalls.js');
  const reply = {tool_calls: [
    {id: 'call_u', type: 'function', function: {name: 'charge_card', arguments: '{"amount":7}'}},
    {id: 'call_l', type: 'function', function: {name: 'fetch_url', arguments: '{"url":"https://example.com"}'}},
  ]};
  const row = (id, name, outcome, result) => ({id, reply_id: 'r', name, arguments: reply.tool_calls.find((c) => c.id === id).function.arguments,
    decision: 'allow', rule: 'operator:cards', reason: '', state: 'finished', outcome, result, error: null});
  const long = Array.from({length: 40}, (_, i) => `line ${i} <b>not markup</b>`).join('\\n');
  const rows = new Map([['call_u', row('call_u', 'charge_card', 'unknown', '')], ['call_l', row('call_l', 'fetch_url', 'ok', long)]]);
  const cards = toolCallsView(callsOf(reply, rows), {answered: new Map(), editing: null, draft: null});
  cards.id = 'cards';
  document.body.append(cards);
}"""


def test_an_unknown_outcome_is_said_plainly_and_a_long_result_is_collapsed(page, web_stack) -> None:
    page.goto(web_stack.url + "/")
    page.evaluate(CARDS)
    unknown = card(page, "call_u")
    expect(unknown.get_by_role("note")).to_have_text(
        "This call was started but its outcome is unknown: it may or may not have taken effect, and it was not repeated."
    )
    expect(unknown.locator(".tool-phase")).to_have_text("Outcome unknown")
    expect(unknown.locator(".tool-decision")).to_have_text("The permission check allowed (rule: operator:cards)")
    long = card(page, "call_l")
    result = long.locator("details .tool-result")
    expect(result).to_be_hidden()  # collapsed
    expect(long.locator("summary")).to_have_text("Result (40 lines)")
    long.locator("summary").click()
    expect(result).to_be_visible()
    expect(result).to_contain_text("line 0 <b>not markup</b>")  # text, never HTML
    assert long.locator("b").count() == 0
