"""What a chat user expects around the messages: the model picker and what each reply records, the
model and token count under a reply, the sidebar's rename, archive, delete and search, and a reply's note
when a worker restarted it. Replies here come from the synthetic engine ("auto" and the small pool)."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect

from schemas.endings import FILTERED_NOTICE
from tests.browser.chat import Chat
from tests.browser.conftest import REAL_MODEL, SYNTHETIC_MODEL, WAIT_MS, served_model


def signed_in_chat(page, web_stack) -> Chat:
    chat = Chat(page, web_stack.url).open().sign_in(web_stack.account)
    chat.signed_in()
    return chat


def eventually(check, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def listed_ids(web_stack, archived: bool = False) -> list[str]:
    response = web_stack.http.get("/v1/conversations", params={"archived": "true"} if archived else None)
    response.raise_for_status()
    return [c["id"] for c in response.json()["conversations"]]


def test_the_model_picker_offers_auto_and_the_served_models_and_the_reply_records_the_choice(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    expect(chat.model_picker).to_have_value("auto")
    expect(chat.model_picker.locator("option")).to_have_count(3)
    assert chat.offered_models() == ["auto", SYNTHETIC_MODEL, REAL_MODEL]
    served = [m["id"] for m in web_stack.http.get("/v1/models").json()["data"]]
    assert sorted(chat.offered_models()) == sorted(served), "the page offers what GET /v1/models lists"

    posts: list[Any] = []
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/messages") and posts.append(r.post_data_json))
    chat.choose_model(SYNTHETIC_MODEL)
    chat.send("Which model are you?")
    reply = chat.streaming_reply()
    expect(reply.locator(".reply-info")).to_have_count(0)  # nothing to say while it streams
    chat.finished(reply)
    assert posts and posts[-1]["model"] == SYNTHETIC_MODEL

    cid, reply_id = chat.conversation_id(), reply.get_attribute("data-id")
    stored = web_stack.settled(cid, reply_id)
    assert stored["model"] == SYNTHETIC_MODEL == served_model(web_stack.inner.engine_url), "what the engine serves"
    # Under the finished reply: the model that answered and its length in tokens.
    info = reply.locator(".reply-info")
    expect(info).to_have_text(re.compile(rf"^{re.escape(SYNTHETIC_MODEL)} · \d+ tokens$"))
    shown_tokens = int(info.inner_text().split(" · ")[1].split()[0])
    if stored.get("tokens") is not None:
        assert shown_tokens == stored["tokens"]
    if stored["finish_reason"] == "length":
        assert shown_tokens == 150  # PARLEY_CONTEXT_MAX_TOKENS
    shoot(page, "10-model-and-tokens")

    # Remembered per conversation, and the last choice is where a new chat starts.
    page.reload()
    expect(chat.model_picker).to_have_value(SYNTHETIC_MODEL)
    expect(chat.reply(reply_id).locator(".reply-info")).to_have_text(re.compile(re.escape(SYNTHETIC_MODEL)))
    page.get_by_role("button", name="New chat", exact=True).click()
    expect(chat.model_picker).to_have_value(SYNTHETIC_MODEL)
    chat.choose_model("auto")
    page.locator(f'a[href="#/c/{cid}"]').click()
    expect(chat.model_picker).to_have_value(SYNTHETIC_MODEL)
    page.get_by_role("button", name="New chat", exact=True).click()
    expect(chat.model_picker).to_have_value("auto")


def test_without_a_model_list_the_picker_offers_auto_alone(page, web_stack) -> None:
    gone = '{"error": {"code": "not_found", "message": "Not Found"}}'
    page.route("**/v1/models", lambda route: route.fulfill(status=404, content_type="application/json", body=gone))
    chat = Chat(page, web_stack.url).open()
    with page.expect_response("**/v1/models"):
        chat.sign_in(web_stack.account)
    chat.signed_in()
    expect(chat.model_picker).to_have_value("auto")
    assert chat.offered_models() == ["auto"]
    expect(page.get_by_role("alert")).to_be_hidden()  # no error for a server without the list


def test_a_new_chat_takes_the_title_the_server_gives_it_after_the_first_reply(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    question = "Tell me about lighthouses"
    chat.send(question)
    reply = chat.streaming_reply()
    cid = chat.conversation_id()
    link = page.locator(f'a[href="#/c/{cid}"]')
    expect(link).to_have_text(question)  # the page's own title for it, until the server names it
    assert web_stack.conversation(cid)["title"] == "", "created untitled, so that the server may name it"
    chat.finished(reply)
    title = eventually(lambda: web_stack.conversation(cid)["title"], "the automatic title", timeout=60)
    expect(link).to_have_text(title)  # the page read the list again, unasked
    expect(page.get_by_role("heading", name=title, exact=True)).to_be_visible()
    shoot(page, "09-titled")


def test_rename_archive_and_delete_from_the_sidebar(page, web_stack, shoot) -> None:
    run = uuid.uuid4().hex[:6]
    titles = {name: f"{name} {run}" for name in ("Renamed", "Archived", "Deleted")}
    ids = {}
    for name, title in titles.items():
        response = web_stack.http.post("/v1/conversations", json={"title": title})
        response.raise_for_status()
        ids[name] = response.json()["id"]
    chat = signed_in_chat(page, web_stack)
    for title in titles.values():
        expect(chat.chat_link(title)).to_be_visible()

    # Rename, inline: the new title is the server's.
    new_title = f"A better name {run}"
    chat.chat_option(titles["Renamed"], "Rename")
    field = page.get_by_label(f"New title for {titles['Renamed']}")
    expect(field).to_be_focused()
    field.fill(new_title)
    field.press("Enter")
    expect(chat.chat_link(new_title)).to_be_visible()
    eventually(lambda: web_stack.conversation(ids["Renamed"])["title"] == new_title, "the new title in the API")

    # Export: the chat's options offer its Markdown and JSON, saved as files named by id (never by title).
    chat.sidebar.get_by_role("button", name=f"Options for {new_title}", exact=True).click()
    with page.expect_download() as download:
        chat.sidebar.get_by_role("link", name=f"Export {new_title} as Markdown", exact=True).click()
    assert download.value.suggested_filename == f"conversation-{ids['Renamed']}.md"
    assert Path(download.value.path()).read_text().startswith(f"# {new_title}")
    with page.expect_download() as download:
        chat.sidebar.get_by_role("link", name=f"Export {new_title} as JSON", exact=True).click()
    assert json.loads(Path(download.value.path()).read_text())["id"] == ids["Renamed"]
    page.keyboard.press("Escape")

    # Archive: out of the list (the API's too), into the archived one, and back.
    chat.chat_option(titles["Archived"], "Archive")
    expect(chat.chat_link(titles["Archived"])).to_have_count(0)
    eventually(lambda: ids["Archived"] not in listed_ids(web_stack), "the archived chat to leave GET /v1/conversations")
    assert ids["Archived"] in listed_ids(web_stack, archived=True)
    page.get_by_role("button", name="Archived chats", exact=True).click()
    expect(chat.chat_link(titles["Archived"])).to_be_visible()
    expect(chat.chat_link(new_title)).to_have_count(0)
    shoot(page, "11-archived-chats")
    chat.chat_option(titles["Archived"], "Unarchive")
    expect(chat.chat_link(titles["Archived"])).to_have_count(0)
    eventually(lambda: ids["Archived"] in listed_ids(web_stack), "the unarchived chat back in GET /v1/conversations")
    page.get_by_role("button", name="Back to chats", exact=True).click()
    expect(chat.chat_link(titles["Archived"])).to_be_visible()

    # Delete asks first; no keeps it, yes deletes it (here the open chat: the page leaves it).
    chat.chat_link(titles["Deleted"]).click()
    expect(page.get_by_role("heading", name=titles["Deleted"])).to_be_visible()
    asked: list[str] = []

    def answer(accept: bool):
        def handle(dialog) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        return handle

    page.once("dialog", answer(False))
    chat.chat_option(titles["Deleted"], "Delete")
    expect(chat.chat_link(titles["Deleted"])).to_be_visible()
    assert asked and titles["Deleted"] in asked[0]
    assert web_stack.http.get(f"/v1/conversations/{ids['Deleted']}").status_code == 200
    page.once("dialog", answer(True))
    chat.chat_option(titles["Deleted"], "Delete")
    expect(chat.chat_link(titles["Deleted"])).to_have_count(0)
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()
    assert "#/c/" not in page.url
    eventually(lambda: web_stack.http.get(f"/v1/conversations/{ids['Deleted']}").status_code == 404, "a 404 for it")
    assert ids["Deleted"] not in listed_ids(web_stack)

    page.reload()  # all of it is the server's
    expect(chat.chat_link(new_title)).to_be_visible()
    expect(chat.chat_link(titles["Archived"])).to_be_visible()
    expect(chat.chat_link(titles["Deleted"])).to_have_count(0)


#: A reply's stream with a `restarted` event in it, fed to the page's own stream reader and view (no worker
#: dies here; test_worker_restart.py kills one).
SYNTHETIC_RESTART = """async () => {
  const { follow } = await import('/static/replies.js');
  const { messageView } = await import('/static/view.js');
  const events = [
    ['message', {conversation_id: 'c', user_message_id: 'u', reply_id: 'r'}],
    ['delta', {text: 'Hello wor'}],
    ['restarted', {message_id: 'r', attempt: 1, offset_chars: 6}],
    ['delta', {text: 'world.'}],
    ['done', {message_id: 'r', finish_reason: 'stop', usage: {prompt_tokens: 3, completion_tokens: 4, cached_tokens: 0}}],
  ];
  const body = events.map(([e, d], i) => `id: 0:${i}\\nevent: ${e}\\ndata: ${JSON.stringify(d)}\\n\\n`).join('');
  const reply = {id: 'r', parent_id: 'u', role: 'assistant', content: '', status: 'streaming'};
  let notes = 0;
  await follow(new Response(body), {head: () => reply, changed: () => {}, restarted: () => notes++});
  const article = messageView({...reply, model: 'm'}, {siblings: [reply], editing: false, busy: false});
  article.id = 'restarted-reply';
  document.body.append(article);
  return {content: reply.content, status: reply.status, restarted: reply.restarted, tokens: reply.tokens, notes};
}"""


def test_search_finds_a_word_from_a_message_on_another_branch_and_opens_that_branch_at_it(page, web_stack, shoot) -> None:
    word = "quern" + uuid.uuid4().hex[:5].translate(str.maketrans("0123456789", "ghijklmnop"))
    chat = signed_in_chat(page, web_stack)
    short = f"[[reply:{base64.b64encode(b'Noted.').decode()}]]"  # the synthetic engine's whole reply: seconds saved
    chat.send(f"Tell me how the {word} lighthouse <b>keepers</b> lived {short}")
    first_reply = chat.streaming_reply()
    chat.finished(first_reply)
    first_id = first_reply.get_attribute("data-id")  # the locator is "the last reply": it moves on after the edit
    question = chat.users.first
    found_id = question.get_attribute("data-id")
    cid = chat.conversation_id()
    web_stack.settled(cid, first_id)

    # An edit makes a second branch, which is then the selected one: the found message is off it.
    question.get_by_role("button", name="Edit this message").click()
    page.get_by_label("Edit your message").fill(f"Something else entirely {short}")
    page.get_by_role("button", name="Save and send", exact=True).click()
    expect(chat.position(question)).to_have_text("2/2")
    second_reply = chat.replies.last
    expect(second_reply).not_to_have_attribute("data-id", first_id)
    chat.finished(second_reply)
    second_id = second_reply.get_attribute("data-id")
    eventually(lambda: web_stack.conversation(cid)["selected_leaf_id"] == second_id, "the second branch selected")
    eventually(lambda: web_stack.http.get("/v1/search", params={"q": word}).json()["results"], "the message indexed")
    page.get_by_role("button", name="New chat").click()

    box = page.get_by_label("Search your chats")
    box.press_sequentially(word[:-2], delay=40)  # a word from the middle of the message, still being typed
    hit = page.locator("#search-results button.search-hit").first
    expect(hit).to_be_visible(timeout=WAIT_MS)
    assert hit.get_attribute("data-message") == found_id
    snippet = hit.locator(".search-snippet")
    expect(snippet).to_contain_text("<b>keepers</b>")  # the message's markup shown as text, never as HTML
    assert snippet.locator("b").count() == 0
    shoot(page, "search-results")
    hit.click()

    expect(chat.users.first.locator(".body")).to_contain_text(word)
    expect(chat.position(chat.users.first)).to_have_text("1/2")
    expect(page.locator(f'article[data-id="{found_id}"]')).to_be_in_viewport()
    assert chat.conversation_id() == cid
    eventually(lambda: web_stack.conversation(cid)["selected_leaf_id"] == first_id, "the found branch selected on the server")
    shoot(page, "search-opened")


def test_an_imported_chatgpt_export_shows_its_branches(page, web_stack, shoot) -> None:
    """Import chats (POST /v1/imports) with ChatGPT's export: the chat opens on the branch ChatGPT had selected, and
    the regenerated reply's other version is one click away."""
    export = json.loads((Path(__file__).parents[1] / "fixtures" / "imports" / "chatgpt_conversations.json").read_text())[:1]
    export[0]["id"] = export[0]["conversation_id"] = str(uuid.uuid4())  # a new source conversation every run
    chat = signed_in_chat(page, web_stack)
    with page.expect_file_chooser() as chosen:
        page.get_by_role("button", name="Import chats").click()
    chosen.value.set_files(files=[{"name": "conversations.json", "mimeType": "application/json", "buffer": json.dumps(export).encode()}])
    expect(chat.chat_link("Trip to Lisbon")).to_be_visible(timeout=WAIT_MS)
    expect(chat.replies.last.locator(".body")).to_have_text("Those are azulejos, in a pattern called padrao.", timeout=WAIT_MS)
    expect(chat.users).to_have_count(2)
    first_reply = chat.replies.first
    expect(first_reply.locator(".body")).to_have_text("Regenerated: start in Belem, then tram 28 to Graca.")
    expect(chat.position(first_reply)).to_have_text("2/2")
    shoot(page, "12-imported")
    first_reply.get_by_role("button", name="Previous version").click()
    expect(chat.replies.first.locator(".body")).to_have_text("Day one: Alfama and tram 28.")
    expect(chat.position(chat.replies.first)).to_have_text("1/2")
    expect(chat.users).to_have_count(1)  # that version was never followed up


def test_a_share_link_opens_signed_out_and_stops_after_revoke_and_after_the_owners_erasure(page, web_stack, browser, shoot) -> None:
    """Share from the chat's options; the link opens in a signed-out browser, read-only, under the same CSP; Stop
    sharing ends it; another owner's link ends with their erasure."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from tests.browser.conftest import new_context
    from tests.e2e.conftest import sign_in
    from tools.client import ParleyClient, session_headers

    title = f"Plan {uuid.uuid4().hex[:6]}"
    cid = web_stack.http.post("/v1/conversations", json={"title": title}).json()["id"]
    with web_stack.http.stream(
        "POST", f"/v1/conversations/{cid}/messages", json={"content": "Shall we share this plan?", "client_message_id": "s1", "max_tokens": 4}
    ) as posted:
        assert posted.status_code == 200 and any(line.startswith("event: done") for line in posted.iter_lines())
    web_stack.settled(cid, next(m["id"] for m in web_stack.conversation(cid)["messages"] if m["role"] == "assistant"))
    chat = signed_in_chat(page, web_stack)
    expect(chat.chat_link(title)).to_be_visible()
    chat.chat_option(title, "Share")
    link = chat.sidebar.get_by_label(f"Link to {title}")
    expect(link).to_have_value(re.compile(r"/s/[A-Za-z0-9_-]{43}$"))
    url = link.input_value()

    stranger = new_context(browser)  # no cookie, nothing stored: a visitor who was sent the link
    try:
        visitor = stranger.new_page()
        blocked: list[str] = []
        visitor.on("console", lambda m: "Content Security Policy" in m.text and blocked.append(m.text))
        visitor.goto(url)
        expect(visitor.locator("article.msg-user .body")).to_have_text("Shall we share this plan?")
        expect(visitor.locator("article.msg-assistant .body")).to_have_text(re.compile(r"\w"))
        expect(visitor.get_by_role("link", name="Continue this chat in my account")).to_be_visible()
        assert blocked == [], blocked
        shoot(visitor, "13-shared")

        chat.sidebar.get_by_role("button", name=f"Stop sharing {title}", exact=True).click()
        eventually(lambda: web_stack.http.get(f"/v1/conversations/{cid}/shares").json()["shares"] == [], "the link revoked")
        visitor.reload()
        expect(visitor.get_by_role("alert")).to_have_text("This link does not exist, or no longer works.")
        expect(visitor.locator("article")).to_have_count(0)

        owner_id, key = web_stack.inner.create_user("sharer", "plus")

        async def shared_turn() -> str:
            client = ParleyClient(web_stack.url, key)
            try:
                cid = await client.create_conversation("Mine to share")
                assert (await client.send(cid, "Something of mine", max_tokens=4)).final.event == "done"
                for _ in range(150):
                    if all(m["status"] != "streaming" for m in (await client.conversation(cid))["messages"]):
                        break
                    await asyncio.sleep(0.2)
                made = await client._http.post(f"/v1/conversations/{cid}/shares", json={})
                return str(made.json()["path"])
            finally:
                await client.close()

        with ThreadPoolExecutor(1) as other_thread:  # Playwright's sync API holds this thread's event loop
            theirs = web_stack.url + other_thread.submit(asyncio.run, shared_turn()).result()
        visitor.goto(theirs)
        expect(visitor.locator("article.msg-user .body")).to_have_text("Something of mine")
        erased = httpx.delete(
            f"{web_stack.url}/v1/me", params={"confirm": "true"},
            headers=session_headers(web_stack.url, *sign_in(web_stack.inner.session, web_stack.url, owner_id)),
        )  # fmt: skip
        assert erased.status_code == 202, erased.text
        visitor.reload()
        expect(visitor.get_by_role("alert")).to_have_text("This link does not exist, or no longer works.")
    finally:
        stranger.close()


def test_a_restarted_reply_keeps_a_visible_note_after_it_ends(page, web_stack) -> None:
    page.goto(web_stack.url + "/")
    out = page.evaluate(SYNTHETIC_RESTART)
    assert out == {"content": "Hello world.", "status": "complete", "restarted": True, "tokens": 4, "notes": 1}
    article = page.locator("#restarted-reply")
    expect(article.get_by_role("note")).to_have_text("Restarted on another worker", timeout=WAIT_MS)
    expect(article.get_by_role("note")).to_be_visible()
    expect(article.locator(".reply-info")).to_have_text("m · 4 tokens")


def test_a_message_moderation_flags_ends_with_a_clear_notice_not_a_broken_reply(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    chat.send("I am going to kill you tonight, you worthless idiot.")
    reply = chat.replies.last
    chat.finished(reply, "filtered")
    expect(reply.get_by_role("note")).to_contain_text(FILTERED_NOTICE)
    expect(reply.locator(".status")).to_have_text("Withheld by moderation")
    assert chat.text(reply).startswith(FILTERED_NOTICE), "what had streamed was left on the page"
    shoot(page, "moderation-notice")
    page.reload()  # the stored reply says the same
    chat.signed_in()
    reply = chat.replies.last
    chat.finished(reply, "filtered")
    expect(reply.get_by_role("note")).to_contain_text(FILTERED_NOTICE)
