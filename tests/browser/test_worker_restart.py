"""A worker killed mid-reply, seen in the browser: a second worker joins the small pool, the one
serving the page's reply is SIGKILLed while it streams, the other continues it, and the page marks
the reply "Restarted on another worker" and keeps the note once it has finished.

Last of the package (its file name sorts last): it leaves the small pool with one worker."""

from __future__ import annotations

import socket

from playwright.sync_api import expect

from schemas.events import TokenChunk
from tests.browser.chat import Chat, words
from tests.browser.conftest import SYNTHETIC_MODEL
from tests.e2e.fleet import read_all, wait_for_fleet
from tools import isolated
from tools.topology import WORKER_SMALL


def serving_worker(kafka, reply_id: str) -> str:
    """The worker id on the reply's first chunk."""

    def first(events):
        return next((e for e in events if isinstance(e, TokenChunk) and e.request_id == reply_id), None)

    chunk = first(read_all(kafka, "chat.tokens", lambda es: first(es) is not None, "the reply's first chunk"))
    assert chunk is not None
    return chunk.replica


def test_a_worker_killed_mid_reply_leaves_a_note_on_the_reply(page, web_stack, shoot) -> None:
    inner = web_stack.inner
    (own,) = [c for c in inner.supervisor.children if c.log.stem == "worker-small" and c.process.poll() is None]
    _, spare = isolated.add_worker(inner, WORKER_SMALL, "worker-small-spare")
    workers = {f"{socket.gethostname()}-{own.process.pid}": own, "worker-small-spare": spare}
    wait_for_fleet(inner.kafka, {w: "small" for w in workers})

    chat = Chat(page, web_stack.url).open().sign_in(web_stack.account)
    chat.signed_in()
    chat.send("Tell me a long story about a lighthouse keeper")
    reply = chat.streaming_reply()
    reply_id = reply.get_attribute("data-id")
    note = reply.get_by_role("note")
    expect(note).to_have_count(0)
    lost = serving_worker(inner.kafka, reply_id)
    workers[lost].process.kill()

    expect(note).to_have_text("Restarted on another worker")
    shoot(page, "14-restarted-streaming")
    chat.finished(reply)
    expect(reply.locator(".reply-info")).to_contain_text(SYNTHETIC_MODEL)  # the page has re-read the stored reply…
    expect(note).to_be_visible()  # …and the note stayed
    stored = web_stack.settled(chat.conversation_id(), reply_id)
    assert words(chat.final_text(reply_id)) == words(stored["content"])
    shoot(page, "15-restarted-done")
