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

**Tools** (a client's functions, OpenAI's ``tools``): each family writes them
as its model was trained to read them, and its model's calls in its format
(workers/tool_calls.py): ChatML the Hermes/Qwen2.5 convention (a ``# Tools``
system section, ``<tool_call>`` in replies, ``<tool_response>`` in a user turn
for each result), Llama-3.1 its own (``Environment: ipython``, the functions
in the first user message, results as ``ipython`` turns), DeepSeek-V3 SGLang's
tool template's (a ``## Tools`` system section, results in
``<｜tool▁outputs▁begin｜>``). A tool choice of ``required`` or a named
function is not written into the prompt: the worker constrains the reply to
a JSON array of calls (workers/tool_calls.py ``forced_schema``).

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

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from schemas.events import PromptMessage, Tools
from workers.tool_calls import DEEPSEEK_V3, HERMES, LLAMA3_JSON, Call, Format

_ZWSP = "\u200b"
#: How every special token of the supported families begins (ASCII bar; DeepSeek's fullwidth bar).
OPENERS = ("<|", "<\uff5c")
ROLES = ("system", "user", "assistant", "tool")


def neutralise(text: str) -> str:
    """``text`` with no special token left in it: a zero-width space after the ``<`` of each opener."""
    for opener in OPENERS:
        text = text.replace(opener, f"<{_ZWSP}{opener[1:]}")
    return text


def _checked(message: PromptMessage) -> str:
    if message.role not in ROLES:  # a role is rendered as text: only the template's own
        raise ValueError(f"a prompt message's role must be one of {ROLES}, got {message.role!r}")
    return neutralise(message.content)


def _calls(message: PromptMessage) -> list[Call]:
    """An assistant message's tool calls, their (client-sent) arguments neutralised."""
    return [Call(c.name, neutralise(c.arguments)) for c in message.tool_calls]


def offered(tools: Tools | None) -> Tools | None:
    """``tools`` when the model is offered any (not ``none``, not empty)."""
    return tools if tools is not None and tools.functions and tools.choice != "none" else None


def tool_json(tools: Tools, indent: int | None = None) -> list[str]:
    """Each function as OpenAI's ``{"type": "function", "function": {…}}`` JSON, neutralised."""
    out = []
    for f in tools.functions:
        function: dict[str, object] = {"name": f.name, "description": f.description}
        if f.parameters:
            function["parameters"] = json.loads(f.parameters)
        out.append(neutralise(json.dumps({"type": "function", "function": function}, ensure_ascii=False, indent=indent)))
    return out


@dataclass(frozen=True)
class ChatTemplate:
    """One family's rendering. ``render_prompt`` is exact; ``render_message`` is one message's share of
    a prompt, for weighing windows (streams/prompt.py): exact for ChatML, within a few tokens for the
    others (whose first message or system messages render differently), and the builder counts the
    final prompt whole."""

    family: str
    #: Stop strings for the engine: the model closing its own turn (its EOS stops it as well).
    stop: tuple[str, ...]
    #: How the family's models write tool calls (workers/tool_calls.py).
    tool_format: ClassVar[Format] = HERMES
    #: The format's markers are special tokens: the engine must not drop them from the text it returns.
    special_tool_markers: ClassVar[bool] = False

    def render_message(self, message: PromptMessage) -> str:
        raise NotImplementedError

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "", tools: Tools | None = None) -> str:
        """The whole prompt, ending where the assistant's reply begins.

        ``resume_text`` is reply text an earlier attempt already streamed; the model continues after it.
        ``tools`` are the functions offered (none, when their choice is ``none``).
        """
        raise NotImplementedError


class ChatML(ChatTemplate):
    START, END = "<|im_start|>", "<|im_end|>"

    TOOLS = (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
        'XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
    )

    def __init__(self) -> None:
        super().__init__("chatml", (self.END,))

    def render_message(self, message: PromptMessage) -> str:
        text = _checked(message)
        if message.role == "tool":  # a result goes back as the user's turn, as Qwen2.5's template writes it
            return f"{self.START}user\n<tool_response>\n{text}\n</tool_response>{self.END}\n"
        if message.tool_calls:  # as Qwen2.5's template: the text (if any) and each call on lines of their own
            lines = ([text] if text else []) + [self.tool_format.render([c]) for c in _calls(message)]
            return f"{self.START}assistant\n" + "\n".join(lines) + f"{self.END}\n"
        return f"{self.START}{message.role}\n{text}{self.END}\n"

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "", tools: Tools | None = None) -> str:
        head = ""
        if (offer := offered(tools)) is not None:
            system = ""
            if messages and messages[0].role == "system":
                system, messages = _checked(messages[0]) + "\n\n", messages[1:]
            listed = self.TOOLS.format(tools="\n".join(tool_json(offer)))
            head = f"{self.START}system\n{system}{listed}{self.END}\n"
        body = "".join(self.render_message(m) for m in messages)
        return f"{head}{body}{self.START}assistant\n{neutralise(resume_text)}"


class Llama3(ChatTemplate):
    EOT = "<|eot_id|>"
    #: What Llama-3.1's template writes at the top of its system block (its date_string default).
    KNOWLEDGE = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"

    #: What the template puts before the first user message when tools are offered (tools_in_user_message).
    TOOLS = (
        "Given the following functions, please respond with a JSON for a function call with its proper arguments "
        'that best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": '
        'dictionary of argument name and its value}.Do not use variables.\n\n'
    )
    tool_format = LLAMA3_JSON
    special_tool_markers = True  # <|python_tag|>

    def __init__(self) -> None:
        super().__init__("llama3", (self.EOT, "<|eom_id|>"))

    @staticmethod
    def header(role: str) -> str:
        return f"<|start_header_id|>{role}<|end_header_id|>\n\n"

    def render_message(self, message: PromptMessage) -> str:
        if message.role == "tool":
            return f"{self.header('ipython')}{_checked(message).strip()}{self.EOT}"
        if message.tool_calls:
            return f"{self.header('assistant')}{self.tool_format.render(_calls(message))}{self.EOT}"
        return f"{self.header(message.role)}{_checked(message).strip()}{self.EOT}"

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "", tools: Tools | None = None) -> str:
        # The template always writes the system block; a first system message fills it.
        system = ""
        if messages and messages[0].role == "system":
            system, messages = _checked(messages[0]).strip(), messages[1:]
        offer = offered(tools)
        environment = "Environment: ipython\n" if offer is not None else ""
        block = f"{self.header('system')}{environment}{self.KNOWLEDGE}{system}{self.EOT}"
        rendered = [self.render_message(m) for m in messages]
        first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
        if offer is not None and first_user is not None:  # the functions open the first user message
            functions = "".join(f"{t}\n\n" for t in tool_json(offer, indent=4))
            text = _checked(messages[first_user]).strip()
            rendered[first_user] = f"{self.header('user')}{self.TOOLS}{functions}{text}{self.EOT}"
        return f"{block}{''.join(rendered)}{self.header('assistant')}{neutralise(resume_text)}"


class DeepSeek(ChatTemplate):
    USER, ASSISTANT, EOS = "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"

    OUTPUT = "<\uff5ctool\u2581output\u2581begin\uff5c>{}<\uff5ctool\u2581output\u2581end\uff5c>"
    OUTPUTS = "<\uff5ctool\u2581outputs\u2581begin\uff5c>{}<\uff5ctool\u2581outputs\u2581end\uff5c>"
    tool_format = DEEPSEEK_V3
    special_tool_markers = True

    def __init__(self) -> None:
        super().__init__("deepseek", (self.EOS,))

    def render_message(self, message: PromptMessage) -> str:
        text = _checked(message)
        if message.role == "system":
            return f"\n\n{text}"
        if message.role == "tool":
            return self.OUTPUTS.format(self.OUTPUT.format(text))
        if message.tool_calls:
            return f"{text}{self.tool_format.render(_calls(message))}{self.EOS}"
        return f"{self.USER}{text}{self.ASSISTANT}" if message.role == "user" else f"{text}{self.EOS}"

    def render_prompt(self, messages: Sequence[PromptMessage], resume_text: str = "", tools: Tools | None = None) -> str:
        # The template gathers every system message, wherever it stands, in front of the turns. The
        # assistant's marker follows each user message, so it opens the reply only after a non-user one
        # (and not after tool results: the model answers right after them, as the template writes it).
        system = "\n\n".join(_checked(m) for m in messages if m.role == "system")
        if (offer := offered(tools)) is not None:
            system = f"{system}\n\n{self._tools(offer)}" if system else self._tools(offer)
        turns = "".join(self.render_message(m) for m in messages if m.role != "system")
        last = next((m.role for m in reversed(messages) if m.role != "system"), None)
        opening = "" if last in ("user", "tool") else self.ASSISTANT
        return f"{system}{turns}{opening}{neutralise(resume_text)}"

    def _tools(self, tools: Tools) -> str:
        fmt = DEEPSEEK_V3
        listed = "".join(
            f"### {f.name}\nDescription: {neutralise(f.description)}\n\nParameters: {neutralise(f.parameters or '{}')}\n\n"
            for f in tools.functions
        )
        example = f"{fmt.BEGIN}{fmt.CALL}function{fmt.SEP}tool_call_name\n```json\ntool_call_arguments\n```{fmt.CALL_END}{fmt.END}"
        return f"## Tools\nYou have access to the following tools:\n\n{listed}IMPORTANT: ALWAYS adhere to this exact format for tool use:\n{example}"


CHATML, LLAMA3, DEEPSEEK = ChatML(), Llama3(), DeepSeek()
TEMPLATES: dict[str, ChatTemplate] = {t.family: t for t in (CHATML, LLAMA3, DEEPSEEK)}
FAMILIES = tuple(TEMPLATES)


def template(family: str) -> ChatTemplate:
    try:
        return TEMPLATES[family]
    except KeyError:
        raise ValueError(f"unknown chat template family {family!r}; known: {', '.join(FAMILIES)}") from None
