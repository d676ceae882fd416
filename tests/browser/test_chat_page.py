"""The web client end to end: a real Chromium, the real gateway, Kafka, Cassandra, worker and
(synthetic, slow) engine. Each test signs in with a fresh browser profile."""

from __future__ import annotations

import json
import re
import time

import httpx

from playwright.sync_api import Route, expect

from tests.browser.chat import Chat, words
from tests.browser.conftest import WAIT_MS, Account


def signed_in_chat(page, web_stack) -> Chat:
    chat = Chat(page, web_stack.url).open().sign_in(web_stack.account)
    chat.signed_in()
    return chat


def test_sign_in_send_and_watch_the_reply_stream(page, web_stack, shoot) -> None:
    chat = Chat(page, web_stack.url).open()
    chat.sign_in(Account(web_stack.account.email, "not the password"))
    expect(page.get_by_role("alert").filter(has_text="not accepted")).to_be_visible()
    chat.sign_in(web_stack.account)
    chat.signed_in()

    question = "Hello <b>there</b>, **friend**"
    chat.send(question)
    reply = chat.streaming_reply()
    expect(chat.users.last.locator(".body")).to_have_text(question)  # the user's text, literally
    assert chat.users.last.locator("b, strong").count() == 0
    expect(reply.locator(".body")).to_have_attribute("aria-busy", "true")
    live_region = reply.locator(".body").element_handle()
    shoot(page, "01-streaming")

    first = len(chat.text(reply))
    page.wait_for_function(
        "([id, n]) => document.querySelector(`article[data-id=\"${id}\"] .body`).innerText.length > n",
        arg=[reply.get_attribute("data-id"), first],
        timeout=WAIT_MS,
    )
    chat.finished(reply)
    expect(reply.locator(".body")).to_have_attribute("aria-busy", "false")
    # The same live-region node went quiet (so a screen reader reads it), not a new one put in its place.
    assert live_region.evaluate("b => b.isConnected && b.getAttribute('aria-busy')") == "false"
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()
    shoot(page, "02-done")

    cid, reply_id = chat.conversation_id(), reply.get_attribute("data-id")
    stored = web_stack.settled(cid, reply_id)
    assert words(chat.final_text(reply_id)) == words(stored["content"])
    expect(page.locator(f'a[href="#/c/{cid}"]')).to_have_attribute("aria-current", "page")
    # The page reported its own time to first token (POST /v1/telemetry), kept apart from the server's.
    assert web_stack.http.get("/metrics").status_code == 404  # not on the API port
    metrics = httpx.get(web_stack.inner.metrics_url(), timeout=10).text
    assert re.search(r'^parley_client_ttft_seconds_count\{client="web"\} [1-9]', metrics, re.M), "no client TTFT"

    page.get_by_role("button", name="Sign out", exact=True).click()
    expect(page.get_by_label("Email", exact=True)).to_be_visible()
    assert page.evaluate("localStorage.getItem('parley.apiKey')") is None


def test_stop_keeps_the_partial_reply(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    chat.send("Please write a long answer that I will stop")
    reply = chat.streaming_reply()
    reply_id = reply.get_attribute("data-id")
    page.get_by_role("button", name="Stop", exact=True).click()

    chat.finished(reply, "cancelled")
    expect(reply.get_by_text("Stopped")).to_be_visible()
    shown = chat.final_text(reply_id)
    assert words(shown), "the partial text stays"
    shoot(page, "03-stopped")

    stored = web_stack.settled(chat.conversation_id(), reply_id)
    assert stored["status"] == "cancelled" and stored["finish_reason"] == "cancelled"
    assert words(shown) == words(stored["content"])


def test_a_reload_mid_reply_resumes_it_to_the_end(page, context, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    chat.send("Tell me a story that takes a while")
    reply_id = chat.streaming_reply().get_attribute("data-id")
    resumes: dict[str, list[dict[str, str]]] = {"reloaded": [], "new tab": []}
    page.on("request", lambda r: "/stream" in r.url and resumes["reloaded"].append(r.headers))

    # A second tab has no cursor for the reply: it replays it from the start.
    other = Chat(context.new_page(), web_stack.url)
    other.page.on("request", lambda r: "/stream" in r.url and resumes["new tab"].append(r.headers))
    other.page.goto(page.url)
    page.reload()  # this tab kept the cursor and the text so far: it continues after them

    for tab in (chat, other):
        expect(tab.reply(reply_id)).to_have_attribute("data-status", "streaming")
    for tab in (chat, other):
        tab.finished(tab.reply(reply_id))
    shoot(page, "04-resumed-after-reload")

    assert resumes["reloaded"] and "last-event-id" in resumes["reloaded"][0]
    assert resumes["new tab"] and "last-event-id" not in resumes["new tab"][0]
    stored = web_stack.settled(chat.conversation_id(), reply_id)
    assert words(chat.final_text(reply_id)) == words(stored["content"])
    assert words(other.final_text(reply_id)) == words(stored["content"])


def test_edit_makes_a_branch_and_the_switcher_moves_between_them(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    # The page re-reads the conversation once a reply ends and redraws the thread: held here until
    # an edit is half typed, so that the redraw lands under the caret (as it did by chance in CI).
    held: list[Route] = []
    page.route(re.compile(r"/v1/conversations/[0-9a-f-]+$"), lambda route: held.append(route))
    chat.send("What is a tree?")
    first_reply = chat.streaming_reply()
    chat.finished(first_reply)
    first_reply_id = first_reply.get_attribute("data-id")
    while not held:
        page.wait_for_timeout(50)
    web_stack.settled(chat.conversation_id(), first_reply_id)

    question = chat.users.first
    question.get_by_role("button", name="Edit this message").click()
    editor = page.get_by_label("Edit your message")
    expect(editor).to_be_focused()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("What is a ")
    question.evaluate("article => { article.dataset.drawn = 'before' }")
    for route in held:
        route.continue_()
    page.unroute(re.compile(r"/v1/conversations/[0-9a-f-]+$"))
    page.wait_for_function("() => !document.querySelector('article[data-drawn]')")  # redrawn
    page.keyboard.type("graph?")
    expect(editor).to_have_value("What is a graph?")  # the draft, the caret and the focus survived
    page.get_by_role("button", name="Save and send", exact=True).click()

    expect(question.locator(".body")).to_have_text("What is a graph?")
    expect(chat.position(question)).to_have_text("2/2")
    second_reply = chat.replies.last
    expect(second_reply).not_to_have_attribute("data-id", first_reply_id)
    chat.finished(second_reply)
    shoot(page, "05-edited-branch")

    question.get_by_role("button", name="Previous version").click()
    expect(question.locator(".body")).to_have_text("What is a tree?")
    expect(chat.position(question)).to_have_text("1/2")
    expect(chat.replies.last).to_have_attribute("data-id", first_reply_id)
    expect(question.get_by_role("button", name="Next version")).to_be_focused()  # focus survives the redraw
    shoot(page, "06-switched-back")

    cid = chat.conversation_id()
    deadline = time.monotonic() + 30
    while web_stack.conversation(cid)["selected_leaf_id"] != first_reply_id:
        assert time.monotonic() < deadline, "the server never recorded the selected branch"
        time.sleep(0.2)
    page.reload()  # the selection is the server's, not the page's
    expect(chat.users.first.locator(".body")).to_have_text("What is a tree?")
    expect(chat.position(chat.users.first)).to_have_text("1/2")


def test_regenerate_adds_a_sibling_reply(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    chat.send("Name three colours")
    first = chat.streaming_reply()
    chat.finished(first)
    first_id = first.get_attribute("data-id")

    first.get_by_role("button", name="Regenerate this reply").click()
    second = chat.replies.last
    expect(second).not_to_have_attribute("data-id", first_id)
    chat.finished(second)
    expect(chat.position(second)).to_have_text("2/2")
    assert chat.users.count() == 1
    shoot(page, "07-regenerated")

    # Thumbs: the server keeps each reply's own rating (FeedbackGiven); the same thumb again takes it back.
    second_id = second.get_attribute("data-id")
    good, bad = second.get_by_role("button", name="Good reply"), second.get_by_role("button", name="Bad reply")
    bad.click()
    expect(bad).to_have_attribute("aria-pressed", "true")
    good.click()
    expect(good).to_have_attribute("aria-pressed", "true")
    expect(bad).to_have_attribute("aria-pressed", "false")
    cid = chat.conversation_id()
    stored = {m["id"]: m.get("feedback") for m in web_stack.conversation(cid)["messages"]}
    assert (stored[second_id], stored[first_id]) == ({"rating": "up", "reason": ""}, None)
    page.reload()  # what the buttons show is the server's
    expect(chat.replies.last.get_by_role("button", name="Good reply")).to_have_attribute("aria-pressed", "true")
    chat.replies.last.get_by_role("button", name="Good reply").click()
    expect(chat.replies.last.get_by_role("button", name="Good reply")).to_have_attribute("aria-pressed", "false")
    assert {m["id"]: m.get("feedback") for m in web_stack.conversation(cid)["messages"]}[second_id] is None
    shoot(page, "07b-rated")

    chat.replies.last.get_by_role("button", name="Previous version").click()
    expect(chat.replies.last).to_have_attribute("data-id", first_id)
    expect(chat.position(chat.replies.last)).to_have_text("1/2")


def test_a_message_sent_while_a_chat_is_opening_goes_to_that_chat(page, web_stack) -> None:
    created = web_stack.http.post("/v1/conversations", json={"title": "Opened from a link"})
    created.raise_for_status()
    cid = created.json()["id"]
    chat = signed_in_chat(page, web_stack)
    posts: list[str] = []
    page.on("request", lambda r: r.method == "POST" and "/v1/conversations" in r.url and posts.append(r.url))
    # Enter pressed in the moment between opening a chat and its messages arriving (a slow network
    # makes that moment long): the page's own hashchange listener runs first, so the chat is being read.
    page.evaluate(
        """async (cid) => {
            const opening = new Promise((resolve) => addEventListener("hashchange", resolve, { once: true }));
            location.hash = `#/c/${cid}`;
            await opening;
            document.getElementById("input").value = "Sent while it opened";
            document.getElementById("composer").requestSubmit();
        }""",
        cid,
    )
    reply = chat.replies.last
    chat.finished(reply)
    assert posts == [f"{web_stack.url}/v1/conversations/{cid}/messages"], "no new chat: the message went to the one opening"
    assert chat.conversation_id() == cid
    stored = web_stack.http.get(f"/v1/conversations/{cid}").json()["messages"]
    assert [m["content"] for m in stored if m["role"] == "user"] == ["Sent while it opened"]


def test_an_overloaded_gateway_shows_the_error_and_retry_sends_the_same_message(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    posts: list[dict] = []

    def first_one_overloaded(route: Route) -> None:
        posts.append(route.request.post_data_json)
        if len(posts) == 1:
            body = {"error": {"code": "overloaded", "message": "The service is overloaded; retry shortly.", "retry_after": 2}}
            route.fulfill(status=503, headers={"Retry-After": "2"}, content_type="application/json", body=json.dumps(body))
        else:
            route.continue_()

    page.route("**/v1/conversations/*/messages", first_one_overloaded)
    chat.send("Are you there?")
    alert = page.get_by_role("alert").filter(has_text="overloaded")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("2 s")
    expect(page.get_by_label("Message", exact=True)).to_have_value("Are you there?")  # nothing lost
    shoot(page, "08-error-with-retry")

    alert.get_by_role("button", name="Retry").click()
    chat.finished(chat.replies.last)
    expect(alert).to_be_hidden()
    assert len(posts) == 2
    assert posts[1]["client_message_id"] == posts[0]["client_message_id"]
    assert posts[1]["content"] == posts[0]["content"] == "Are you there?"
