"""Documents on the web page, against the real stack and its document workers: attach a PDF and watch
its chip go from uploading through processing to ready, ask the real model about it, and open what
the reply cites; refused files say why on their chip. The page's pure helpers (where a quote is in
a page, what a chip says) are checked in the same browser first.

The real model (SmolLM2-135M, greedy) may or may not echo the page closely enough for the server's
lexical check to cite it, so the first question asserts what is certain: the page shows exactly what
the `done` event and the stored reply say, numbered citations or the "uncited" note. The second asks
it to repeat the page's sentence, which makes a citation near-certain, and requires one: it reopens
that stored reply and opens its citation with the keyboard."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.chat import Chat, words
from tests.browser.conftest import REAL_MODEL, WAIT_MS
from tests.fixtures.documents import PDF_PAGES, empty, pdf_with_javascript, text_pdf

UNCITED = "No passage of the attached documents was cited"
#: Page 2 of PDF_PAGES, word for word: a reply that echoes it shares all its content terms.
PAGE_2_SENTENCE = "The pomegranate harvest doubled after the new irrigation channels were dug."
#: A chip's status, as documents.js's statusText writes it.
CHIP_STATUS = re.compile(r"^(uploading( \d{1,3}%|…)|processing(…| \d+/\d+ pages)|ready|failed: .+)$")

#: Every status text each chip shows, in order, keyed by file name (the page draws chips anew on each change).
RECORD_CHIPS = """
window.__chips = {};
new MutationObserver(() => {
  for (const chip of document.querySelectorAll('#attachments li.chip')) {
    const name = chip.querySelector('.chip-name')?.textContent, status = chip.querySelector('.chip-status')?.textContent;
    const seen = (window.__chips[name] ||= []);
    if (seen.at(-1) !== status) seen.push(status);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


#: Keeps a copy of each reply stream the page reads for a posted message (the page reads the original).
RECORD_STREAMS = """
window.__streams = [];
const fetched = window.fetch;
window.fetch = async (input, init) => {
  const response = await fetched(input, init);
  if (!(init?.method === 'POST' && String(input).endsWith('/messages') && response.ok && response.body)) return response;
  const [mine, copy] = response.body.tee();
  new Response(copy).text().then((text) => window.__streams.push(text));
  return new Response(mine, {status: response.status, statusText: response.statusText, headers: response.headers});
};
"""


def signed_in_chat(page: Page, web_stack) -> Chat:
    page.add_init_script(RECORD_CHIPS)
    page.add_init_script(RECORD_STREAMS)
    chat = Chat(page, web_stack.url).open().sign_in(web_stack.account)
    chat.signed_in()
    return chat


def greedy(route) -> None:
    """The page's message, asking for temperature 0 (the page has no control for it; the API has)."""
    body = route.request.post_data_json
    route.continue_(post_data=json.dumps({**body, "sampling": {"temperature": 0}}))


def attach(page: Page, name: str, data: bytes, mime: str) -> None:
    """Attaches a file the way a user does: the Attach button, then the file chooser."""
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach a document").click()
    chooser.value.set_files(files=[{"name": name, "mimeType": mime, "buffer": data}])


#: A DataTransfer holding one file, as a drag from the desktop carries it.
DRAGGED_FILE = """([name, type, bytes]) => {
  const dt = new DataTransfer();
  dt.items.add(new File([new Uint8Array(bytes)], name, {type}));
  return dt;
}"""


def drop(page: Page, name: str, data: bytes, mime: str) -> None:
    """Drags a file over the composer (which says it will take it) and drops it there."""
    dragged = page.evaluate_handle(DRAGGED_FILE, [name, mime, list(data)])
    composer = page.locator("#composer")
    composer.dispatch_event("dragover", {"dataTransfer": dragged})
    expect(composer).to_have_class(re.compile(r"\bdropping\b"))
    composer.dispatch_event("drop", {"dataTransfer": dragged})
    expect(composer).not_to_have_class(re.compile(r"\bdropping\b"))


def chip(page: Page, name: str):
    return page.locator("#attachments li.chip").filter(has=page.locator(".chip-name", has_text=name))


def conversation_documents(web_stack, conversation_id: str) -> list[dict[str, Any]]:
    response = web_stack.http.get("/v1/documents")
    response.raise_for_status()
    return [d for d in response.json()["data"] if d["conversation_id"] == conversation_id]


def ready_document(web_stack, document_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc = web_stack.http.get(f"/v1/documents/{document_id}").json()
        if doc["status"] != "processing":
            assert doc["status"] == "ready", doc
            return doc
        assert time.monotonic() < deadline, f"document still processing after {timeout} s: {doc}"
        time.sleep(0.3)


def done_event(sse: str) -> dict[str, Any]:
    """The data of the `done` event of a reply's SSE body."""
    for block in re.split(r"\r?\n\r?\n", sse.replace("\r\n", "\n")):
        lines = block.splitlines()
        if "event: done" in lines:
            return json.loads("\n".join(line[len("data: "):] for line in lines if line.startswith("data: ")))
    raise AssertionError(f"no done event in {sse[-500:]!r}")


def ask(chat: Chat, question: str) -> tuple[Any, dict[str, Any], list[Any]]:
    """Asks the real model, greedy: (the reply's article, its stream's done event's data, the message bodies posted)."""
    page = chat.page
    posts: list[Any] = []
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/messages") and posts.append(r.post_data_json))
    page.route("**/v1/conversations/*/messages", greedy)
    expect(chat.model_picker.locator(f'option[value="{REAL_MODEL}"]')).to_have_count(1)
    chat.choose_model(REAL_MODEL)
    streams = page.evaluate("window.__streams.length")
    chat.send(question)
    reply = chat.replies.last
    chat.finished(reply)
    page.wait_for_function("n => window.__streams.length > n", arg=streams, timeout=WAIT_MS)
    return reply, done_event(page.evaluate("window.__streams.at(-1)")), posts


def open_citation_and_check(page: Page, web_stack, citation: dict[str, Any], button) -> None:
    """The panel a citation opens: the cited page's text as the API serves it, the quoted span marked."""
    served = web_stack.http.get(f"/v1/documents/{citation['document_id']}/pages/{citation['page']}")
    served.raise_for_status()
    panel = page.get_by_role("dialog", name=f"{citation['filename']}, page {citation['page']}")
    expect(panel).to_be_visible()
    text = panel.locator(".page-text")
    expect(text).to_have_text(served.json()["text"], use_inner_text=False)
    mark = text.locator("mark")
    expect(mark).to_have_count(1)
    marked, quoted = words(mark.inner_text()).lower(), words(citation["text"]).lower()
    assert marked and quoted.startswith(marked), f"marked {marked!r} for the quote {quoted!r}"
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(button).to_be_focused()  # back where the user was


# ------------------------------------------------------------------ the page's helpers

HELPERS = """async () => {
  const { locate, markerCitation } = await import('/static/citations.js');
  const { statusText } = await import('/static/documents.js');
  const page = 'Orchard yields\\n\\nThe pomegranate harvest   doubled after the\\nnew irrigation channels were dug. Apples stayed flat.';
  const cite = [{number: 1, page: 2, filename: 'report.pdf'}, {number: 2, page: 5, filename: 'other.pdf'}];
  const doc = (status, ready, total, error) => ({doc: {status, pages_ready: ready, pages_total: total, error}});
  return {
    exact: locate(page, 'Apples stayed flat.'),
    respaced: locate(page, 'The Pomegranate harvest doubled after the new irrigation channels were dug.'),
    runsOn: locate(page, 'The new irrigation channels were dug. Apples stayed flat. Pickers were paid by the crate.'),
    absent: locate(page, 'Nothing of this sentence is on the page at all.'),
    markers: ['[1]', '[2]', '[3]', '[report.pdf p.2]', '[p.5]', '[Report.PDF p. 2]', '[other.pdf p.2]', '[x]']
      .map((t) => markerCitation(t, cite)?.number ?? null),
    chips: [
      statusText({progress: {sent: 0, total: 2000}, doc: null, error: null}),
      statusText({progress: {sent: 1000, total: 2000}, doc: null, error: null}),
      statusText(doc('processing', 0, 0)),
      statusText(doc('processing', 12, 150)),
      statusText(doc('ready', 3, 3)),
      statusText(doc('failed', 0, 0, {code: 'active_content', message: 'The PDF runs JavaScript.'})),
      statusText({progress: null, doc: null, error: {code: 'empty_file', message: 'The file is empty.'}}),
    ],
    page,
  };
}"""


def test_the_pages_document_helpers(page, web_stack) -> None:
    page.goto(web_stack.url + "/")
    out = page.evaluate(HELPERS)
    text = out["page"]
    assert text[slice(*out["exact"])] == "Apples stayed flat."
    assert words(text[slice(*out["respaced"])]) == "The pomegranate harvest doubled after the new irrigation channels were dug."
    # A quote that runs on past the page: the longest leading run of its words that is there.
    assert words(text[slice(*out["runsOn"])]) == "the new irrigation channels were dug. Apples stayed flat."
    assert out["absent"] is None
    assert out["markers"] == [1, 2, None, 1, 2, 1, None, None]
    assert out["chips"] == [
        "uploading 0%",
        "uploading 50%",
        "processing…",
        "processing 12/150 pages",
        "ready",
        "failed: The PDF runs JavaScript.",
        "failed: The file is empty.",
    ]


# ------------------------------------------------------------------ attach, watch, ask, open a citation


def test_attach_a_pdf_watch_it_become_ready_ask_and_see_what_the_reply_cited(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    attach(page, "harvests.pdf", text_pdf(PDF_PAGES), "application/pdf")

    # The page made a chat for it (none was open) and uploaded into it; the chip follows the document.
    expect(chip(page, "harvests.pdf")).to_have_attribute("data-status", "ready", timeout=WAIT_MS)
    cid = chat.conversation_id()
    docs = conversation_documents(web_stack, cid)
    assert [d["filename"] for d in docs] == ["harvests.pdf"], docs
    doc = ready_document(web_stack, docs[0]["id"])
    assert doc["pages_total"] == doc["pages_ready"] == 3, doc
    shown: list[str] = page.evaluate("window.__chips['harvests.pdf']")
    assert shown[0].startswith("uploading"), shown
    assert shown[-1] == "ready", shown
    assert all(CHIP_STATUS.match(s) for s in shown), shown
    for s in shown:  # what processing showed counted the document's own pages
        if m := re.fullmatch(r"processing (\d+)/(\d+) pages", s):
            assert int(m.group(2)) == 3 and int(m.group(1)) <= 3, shown
    expect(chip(page, "harvests.pdf").get_by_role("button", name="Delete harvests.pdf")).to_be_visible()
    shoot(page, "20-document-ready")

    reply, done, posts = ask(chat, "According to the report, what happened to the pomegranate harvest after the new irrigation channels were dug?")
    assert posts[-1].get("document_ids") == [doc["id"]], "the first message names the document it brought"
    expect(chat.users.last.locator(".doc-tag")).to_have_text(["harvests.pdf"])

    reply_id = reply.get_attribute("data-id")
    stored = web_stack.settled(cid, reply_id)
    assert done["citation_status"] in ("cited", "uncited"), done
    assert stored["citation_status"] == done["citation_status"], (stored, done)
    assert stored.get("citations", []) == done.get("citations", []), (stored, done)
    note = done.get("documents_note") or (stored.get("retrieval") or {}).get("note") or ""
    if note:
        expect(reply.locator(".note-documents")).to_have_text(note)
    else:
        expect(reply.locator(".note-documents")).to_have_count(0)

    buttons = reply.locator(".sources button.cite")
    if done["citation_status"] == "cited":
        cited = done["citations"]
        assert cited and [c["number"] for c in cited] == list(range(1, len(cited) + 1)), cited
        expect(buttons).to_have_text([f"[{c['number']}] {c['filename']} p.{c['page']}" for c in cited])
        expect(reply.get_by_text(UNCITED)).to_have_count(0)
        assert all(c["filename"] == "harvests.pdf" and c["document_id"] == doc["id"] for c in cited), cited
        buttons.first.click()
        open_citation_and_check(page, web_stack, cited[0], buttons.first)
    else:
        expect(reply.get_by_role("note").filter(has_text=UNCITED)).to_be_visible()
        expect(buttons).to_have_count(0)
    shoot(page, f"21-reply-{done['citation_status']}")


def test_a_stored_reply_that_cites_opens_the_cited_page_from_the_keyboard(page, web_stack, shoot) -> None:
    # The chat and its document through the API: the page lists the chat's documents when it opens it.
    created = web_stack.http.post("/v1/conversations", json={"title": "Orchard report"})
    created.raise_for_status()
    cid = created.json()["id"]
    upload = web_stack.http.post(
        "/v1/documents",
        files={"file": ("orchard.pdf", text_pdf(PDF_PAGES), "application/pdf")},
        data={"conversation_id": cid},
    )
    assert upload.status_code == 202, upload.text
    doc = ready_document(web_stack, upload.json()["id"])

    chat = signed_in_chat(page, web_stack)
    page.goto(f"{web_stack.url}/#/c/{cid}")
    expect(chip(page, "orchard.pdf")).to_have_attribute("data-status", "ready")
    expect(chip(page, "orchard.pdf").locator(".chip-status")).to_have_text("ready")

    reply, done, posts = ask(chat, f"Repeat this sentence exactly: {PAGE_2_SENTENCE}")
    assert "document_ids" not in posts[-1], "a document attached to the chat needs no naming again"
    reply_id = reply.get_attribute("data-id")
    stored = web_stack.settled(cid, reply_id)
    assert stored["citation_status"] == "cited" and stored["citations"], (
        f"the reply echoed page 2 and was not cited: {stored['content']!r} ({stored['citation_status']!r})"
    )
    cited = stored["citations"][0]
    assert cited["page"] == 2 and cited["document_id"] == doc["id"], stored["citations"]

    # Reopened: the stored reply's citations, and the keyboard opens one.
    page.reload()
    reopened = chat.reply(reply_id)
    expect(reopened).to_have_attribute("data-status", "complete")
    button = reopened.locator(".sources button.cite").first
    expect(button).to_have_text("[1] orchard.pdf p.2")
    button.focus()
    page.keyboard.press("Enter")
    open_citation_and_check(page, web_stack, cited, button)
    shoot(page, "22-citation-reopened")


def test_refused_files_say_why_on_their_chip(page, web_stack) -> None:
    chat = signed_in_chat(page, web_stack)
    # Refused at the door (422 empty_file): the chip carries the server's own message.
    refused = web_stack.http.post("/v1/documents", files={"file": ("empty.txt", empty(), "text/plain")})
    assert refused.status_code == 422, refused.text
    attach(page, "empty.txt", empty(), "text/plain")
    expect(chip(page, "empty.txt").locator(".chip-status")).to_have_text(f"failed: {refused.json()['error']['message']}")
    expect(chip(page, "empty.txt")).to_have_attribute("data-status", "failed")

    # Refused by the checks after upload (active content), dropped onto the composer this time: the chip
    # turns failed with the document's error.
    drop(page, "scripted.pdf", pdf_with_javascript(), "application/pdf")
    expect(chip(page, "scripted.pdf")).to_have_attribute("data-status", "failed")
    docs = [d for d in conversation_documents(web_stack, chat.conversation_id()) if d["filename"] == "scripted.pdf"]
    if docs:  # stored and refused later, not at the door
        assert docs[0]["status"] == "failed" and docs[0]["error"]["code"] == "active_content", docs[0]
        expect(chip(page, "scripted.pdf").locator(".chip-status")).to_have_text(f"failed: {docs[0]['error']['message']}")

    # A refused upload is dismissed from the page alone.
    chip(page, "empty.txt").get_by_role("button", name="Dismiss empty.txt").click()
    expect(chip(page, "empty.txt")).to_have_count(0)
    expect(chip(page, "scripted.pdf")).to_have_count(1)
