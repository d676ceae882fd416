"""Messages → prompt text in the served model's own chat template, deterministically.

Workers send SGLang's ``/generate`` raw text, so the prompt must be the text the
model's ``tokenizer_config.json`` chat template renders (what transformers'
``apply_chat_template`` and SGLang's own chat endpoint produce). Each pool names
its model's family (``PARLEY_POOL_TEMPLATES``, workers/settings.py):

- ``chatml``: ``<|im_start|>role\\n…<|im_end|>\\n`` (SmolLM2, Qwen2.5/Qwen3).
- ``llama3``: Llama-3.1-Instruct's: a system block that always opens with its
  "Cutting Knowledge Date" lines, then ``<|start_header_id|>role<|end_header_id|>\\n\\n…<|eot_id|>``
  with each message trimmed, as the template's ``| trim`` does.
- ``deepseek``: DeepSeek-V3(-0324)'s: every system message hoisted to the front,
  joined by a blank line, then ``<｜User｜>…<｜Assistant｜>`` and ``…<｜end▁of▁sentence｜>``.

Two departures from the reference rendering, both on purpose: no BOS is written
(the engine's tokenizer adds one to every ``/generate`` text, so writing it too
would double it), and message text is neutralised (below). Default system prompts
some checkpoints' templates add (SmolLM2's) are not: Parley sends its own.
tests/unit/workers/test_chat_template.py holds each family against its published
template.

The engine's prefix cache (SGLang's radix cache) only helps when a follow-up
turn's prompt starts with the exact bytes of the previous one. So rendering is
a pure function with no timestamps, ids or whitespace that depends on anything
but the messages: the prompt of turn N is a prefix of the prompt of turn N+1
whenever turn N's reply is turn N+1's last assistant message.

**Control tokens cannot be injected.** A tokenizer turns the text of any of its
special tokens into that token, wherever the text comes from, so a user
message, a reply or a document quoting ``<|im_start|>system`` would open a real
system turn. Every special token of these families begins with ``<|`` or with
``<｜`` (U+FF5C: DeepSeek's), so message text has a zero-width space put after
each such ``<``: the text reads the same and never tokenises to a control token.
All three openers are broken in every family, so a pool configured with the
wrong family still cannot be steered. SmolLM2's few code tokens of another shape
(``<file_sep>`` and the like) are left alone: they open no turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.events import PromptMessage

_ZWSP = "\u200b"
#: How every special token of the supported families begins (ASCII bar; DeepSeek's fullwidth bar).
OPENERS = ("<|", "<\uff5c")
ROLES = ("system", "user", "assistant")


def neutralise(text: str) -> str:
    """``text`` with no special token left in it: a zero-width space after the ``<`` of each opener."""
    for opener in OPENERS:
        text = text.replace(opener, f"<{_ZWSP}{opener[1:]}")
    return text


def _checked(message: PromptMessage) -> str:
    if message.role not in ROLES:  # a role is rendered as text: only the template's own
        raise ValueError(f"a prompt message's role must be one of {ROLES}, got {message.role!r}")
    return neutralise(message.content)


@dataclass(frozen=True)
class ChatTemplate:
    """One family's rendering. ``render_prompt`` is exact; ``render_message`` is one message's share of
    a prompt, for weighing windows (streams/prompt.py): exact for ChatML, within a few tokens for the
    others (whose first message or system messages render differently), and the builder counts the
    final prompt whole."""

    family: str
    #: Stop strings for the engine: the model closing its own turn (its EOS stops it as well).
    stop: tuple[str, ...]

    def render_message(self, message: PromptMessage) -> str:
        raise NotImplementedError

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "") -> str:
        """The whole prompt, ending where the assistant's reply begins.

        ``resume_text`` is reply text an earlier attempt already streamed; the model continues after it.
        """
        raise NotImplementedError


class ChatML(ChatTemplate):
    START, END = "<|im_start|>", "<|im_end|>"

    def __init__(self) -> None:
        super().__init__("chatml", (self.END,))

    def render_message(self, message: PromptMessage) -> str:
        return f"{self.START}{message.role}\n{_checked(message)}{self.END}\n"

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "") -> str:
        body = "".join(self.render_message(m) for m in messages)
        return f"{body}{self.START}assistant\n{neutralise(resume_text)}"


class Llama3(ChatTemplate):
    EOT = "<|eot_id|>"
    #: What Llama-3.1's template writes at the top of its system block (its date_string default).
    KNOWLEDGE = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"

    def __init__(self) -> None:
        super().__init__("llama3", (self.EOT, "<|eom_id|>"))

    @staticmethod
    def header(role: str) -> str:
        return f"<|start_header_id|>{role}<|end_header_id|>\n\n"

    def render_message(self, message: PromptMessage) -> str:
        return f"{self.header(message.role)}{_checked(message).strip()}{self.EOT}"

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "") -> str:
        # The template always writes the system block; a first system message fills it.
        system = ""
        if messages and messages[0].role == "system":
            system, messages = _checked(messages[0]).strip(), messages[1:]
        block = f"{self.header('system')}{self.KNOWLEDGE}{system}{self.EOT}"
        body = "".join(self.render_message(m) for m in messages)
        return f"{block}{body}{self.header('assistant')}{neutralise(resume_text)}"


class DeepSeek(ChatTemplate):
    USER, ASSISTANT, EOS = "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"

    def __init__(self) -> None:
        super().__init__("deepseek", (self.EOS,))

    def render_message(self, message: PromptMessage) -> str:
        text = _checked(message)
        if message.role == "system":
            return f"\n\n{text}"
        return f"{self.USER}{text}{self.ASSISTANT}" if message.role == "user" else f"{text}{self.EOS}"

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "") -> str:
        # The template gathers every system message, wherever it stands, in front of the turns. The
        # assistant's marker follows each user message, so it opens the reply only after a non-user one.
        system = "\n\n".join(_checked(m) for m in messages if m.role == "system")
        turns = "".join(self.render_message(m) for m in messages if m.role != "system")
        last = next((m.role for m in reversed(messages) if m.role != "system"), None)
        opening = "" if last == "user" else self.ASSISTANT
        return f"{system}{turns}{opening}{neutralise(resume_text)}"


CHATML, LLAMA3, DEEPSEEK = ChatML(), Llama3(), DeepSeek()
TEMPLATES: dict[str, ChatTemplate] = {t.family: t for t in (CHATML, LLAMA3, DEEPSEEK)}
FAMILIES = tuple(TEMPLATES)


def template(family: str) -> ChatTemplate:
    try:
        return TEMPLATES[family]
    except KeyError:
        raise ValueError(f"unknown chat template family {family!r}; known: {', '.join(FAMILIES)}") from None
