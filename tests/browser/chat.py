"""The web client as a test drives it: roles and labels, as a keyboard or screen-reader user finds them."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import WAIT_MS, Account

#: Records each reply's text at the moment the page first shows it finished, before the page
#: re-reads the conversation from the server: what the stream itself produced.
RECORD_FINALS = """
window.__finals = {};
new MutationObserver(() => {
  for (const a of document.querySelectorAll('article.msg-assistant[data-status]')) {
    const status = a.getAttribute('data-status');
    const body = a.querySelector('.body');
    if (status !== 'streaming' && body && !(a.dataset.id in window.__finals)) window.__finals[a.dataset.id] = body.innerText;
  }
}).observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-status']});
"""


def words(text: str) -> str:
    return " ".join(text.split())


class Chat:
    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url
        page.add_init_script(RECORD_FINALS)

    def open(self) -> Chat:
        self.page.goto(self.url + "/")
        return self

    def sign_in(self, account: Account) -> Chat:
        self.page.get_by_label("Email", exact=True).fill(account.email)
        field = self.page.get_by_label("Password", exact=True)
        field.fill(account.password)
        field.press("Enter")  # the keyboard is enough
        return self

    def signed_in(self) -> None:
        expect(self.page.get_by_role("button", name="New chat", exact=True)).to_be_visible()

    @property
    def model_picker(self) -> Locator:
        return self.page.get_by_label("Model", exact=True)

    def offered_models(self) -> list[str]:
        values: Any = self.model_picker.evaluate("s => [...s.options].map((o) => o.value)")
        return list(values)

    def choose_model(self, model: str) -> None:
        self.model_picker.select_option(model)

    @property
    def sidebar(self) -> Locator:
        return self.page.get_by_role("navigation", name="Conversations")

    def chat_link(self, title: str) -> Locator:
        return self.sidebar.get_by_role("link", name=title, exact=True)

    def chat_option(self, title: str, option: str) -> None:
        """Opens the chat's options in the sidebar and picks one (Rename, Archive, Unarchive, Delete)."""
        self.sidebar.get_by_role("button", name=f"Options for {title}", exact=True).click()
        self.sidebar.get_by_role("button", name=f"{option} {title}", exact=True).click()

    def clipboard(self) -> str:
        value: Any = self.page.evaluate("navigator.clipboard.readText()")
        return str(value)

    def send(self, text: str) -> None:
        box = self.page.get_by_label("Message", exact=True)
        box.fill(text)
        box.press("Enter")

    @property
    def users(self) -> Locator:
        return self.page.locator("article.msg-user")

    @property
    def replies(self) -> Locator:
        return self.page.locator("article.msg-assistant")

    def reply(self, reply_id: str) -> Locator:
        return self.page.locator(f'article.msg-assistant[data-id="{reply_id}"]')

    def streaming_reply(self) -> Locator:
        """The last reply once it is streaming and shows some text."""
        reply = self.replies.last
        expect(reply).to_have_attribute("data-status", "streaming")
        expect(reply.locator(".body")).to_have_text(re.compile(r"\w"))
        return reply

    def finished(self, reply: Locator, status: str = "complete") -> None:
        expect(reply).to_have_attribute("data-status", status, timeout=WAIT_MS)

    def text(self, message: Locator) -> str:
        return message.locator(".body").inner_text()

    def position(self, message: Locator) -> Locator:
        return message.locator(".position")

    def conversation_id(self) -> str:
        match = re.search(r"#/c/([^/?]+)$", self.page.url)
        assert match, f"no conversation in the page's address {self.page.url}"
        return match.group(1)

    def final_text(self, reply_id: str) -> str:
        """The reply's text as the stream left it (see RECORD_FINALS)."""
        self.page.wait_for_function("id => id in window.__finals", arg=reply_id, timeout=WAIT_MS)
        value: Any = self.page.evaluate("id => window.__finals[id]", reply_id)
        return str(value)
