"""The page with a real model: SmolLM2-135M-Instruct on the CPU engine (the medium pool), chosen in
the model picker and asked for temperature 0, answers in readable English; its code comes in a box with a
copy button, and each reply copies as the Markdown it was written in."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from tests.browser.chat import Chat, words
from tests.browser.conftest import REAL_MODEL, served_model


def signed_in_chat(page, web_stack) -> Chat:
    chat = Chat(page, web_stack.url).open().sign_in(web_stack.account)
    chat.signed_in()
    return chat


def readability(text: str) -> tuple[float, float]:
    """(share of printable characters, share of whitespace-separated tokens that are words)."""
    printable = sum(c.isprintable() or c in "\n\t" for c in text) / max(1, len(text))
    tokens = text.split()
    is_word = [t.strip(".,;:!?\"'()[]*`").replace("'", "").replace("-", "").isalpha() for t in tokens]
    return printable, sum(is_word) / max(1, len(tokens))


def greedy(route) -> None:
    """The page's message, asking for temperature 0 (the page has no control for it; the API has)."""
    body = route.request.post_data_json
    route.continue_(post_data=json.dumps({**body, "sampling": {"temperature": 0}}))


def ask_the_real_model(chat: Chat, question: str):
    chat.page.route("**/v1/conversations/*/messages", greedy)
    expect(chat.model_picker.locator(f'option[value="{REAL_MODEL}"]')).to_have_count(1)
    chat.choose_model(REAL_MODEL)
    chat.send(question)
    reply = chat.replies.last
    chat.finished(reply)
    return reply


def test_the_real_model_answers_the_capital_of_france_in_readable_english(page, web_stack, shoot) -> None:
    chat = signed_in_chat(page, web_stack)
    reply = ask_the_real_model(chat, "What is the capital of France?")
    text = chat.text(reply)
    printable, wordy = readability(text)
    assert printable >= 0.9 and wordy >= 0.8, f"not readable: {printable:.0%} printable, {wordy:.0%} words: {text!r}"
    assert "paris" in text.lower(), text  # greedy SmolLM2: "The capital of France is Paris."

    stored = web_stack.settled(chat.conversation_id(), reply.get_attribute("data-id"))
    assert stored["model"] == REAL_MODEL == served_model(web_stack.real_engine_url), "the chosen model answered"
    assert words(stored["content"]) == words(text)
    info = reply.locator(".reply-info")
    expect(info).to_have_text(re.compile(r"^SmolLM2-135M-Instruct · \d+ tokens?$"))
    if stored.get("tokens") is not None:
        assert info.inner_text().endswith(f"{stored['tokens']} tokens")
    shoot(page, "12-real-model")


#: Whether the code element's font is monospaced, measured: a line of i's as wide as one of M's.
MONOSPACED = """code => {
  const probe = (s) => { const span = document.createElement('span'); span.textContent = s; code.append(span);
    const w = span.getBoundingClientRect().width; span.remove(); return w; };
  const pre = code.closest('pre'), box = code.closest('.code-block');
  const c = getComputedStyle(code), p = getComputedStyle(pre), b = getComputedStyle(box);
  return {font: c.fontFamily, narrow: probe('iiiiiiiiii'), wide: probe('MMMMMMMMMM'), whiteSpace: c.whiteSpace,
          overflowX: p.overflowX, padding: parseFloat(p.paddingLeft), background: b.backgroundColor, border: b.borderTopStyle};
}"""


def test_a_code_block_is_a_monospace_box_and_the_copy_buttons_copy_code_and_reply(page, context, web_stack, shoot) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=web_stack.url)
    chat = signed_in_chat(page, web_stack)
    reply = ask_the_real_model(chat, "Show a hello world program in Python.")
    stored = web_stack.settled(chat.conversation_id(), reply.get_attribute("data-id"))
    expect(reply.locator(".reply-info")).to_contain_text("SmolLM2")  # the page has re-read the stored reply
    fence = re.search(r"^\s{0,3}```\s*([A-Za-z0-9_+-]*)\s*$", stored["content"], re.M)
    assert fence, f"SmolLM2 (greedy) used to answer this with a fenced block; now: {stored['content']!r}"

    block = reply.locator(".code-block").first
    expect(block).to_be_visible()
    expect(block.locator(".code-lang")).to_have_text(fence.group(1) or "code")
    style = block.locator("code").evaluate(MONOSPACED)
    assert "mono" in style["font"].lower() and style["narrow"] == style["wide"] > 0, style
    assert style["whiteSpace"] == "pre" and style["overflowX"] in ("auto", "scroll"), style
    assert style["padding"] > 0 and style["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), style
    shoot(page, "13-code-block")

    code = block.locator("code").text_content() or ""
    assert code.strip() and code in stored["content"]
    copy_code = block.get_by_role("button", name=re.compile(r"^Copy the "))
    copy_code.click()
    expect(copy_code).to_have_text("Copied")
    assert chat.clipboard() == code

    copy_reply = reply.get_by_role("button", name="Copy this reply")
    copy_reply.click()
    expect(copy_reply).to_have_text("Copied")
    assert chat.clipboard() == stored["content"], "the reply as Markdown, fences and all"
    expect(copy_reply).to_have_text("Copy")  # the feedback goes again
