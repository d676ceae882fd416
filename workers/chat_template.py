"""Messages → prompt text, deterministically (ChatML).

The engine's prefix cache (SGLang's radix cache) only helps when a follow-up
turn's prompt starts with the exact bytes of the previous one. So rendering is
a pure function with no timestamps, ids or whitespace that depends on anything
but the messages, and each message renders on its own: the prompt of turn N is
a prefix of the prompt of turn N+1 whenever the reply of turn N appears
verbatim as the assistant message of turn N+1.

Message text cannot forge turn boundaries: the marker sequences are broken up
with a zero-width space, the same way every time, so cache stability holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.events import PromptMessage

START = "<|im_start|>"
END = "<|im_end|>"
#: Stop strings the engine should honour: the model closing its own turn.
STOP: tuple[str, ...] = (END,)

_ZWSP = "\u200b"


def _neutralise(text: str) -> str:
    return text.replace(START, f"<|{_ZWSP}im_start|>").replace(END, f"<|{_ZWSP}im_end|>")


def render_message(message: PromptMessage) -> str:
    return f"{START}{message.role}\n{_neutralise(message.content)}{END}\n"


def render_prompt(messages: Sequence[PromptMessage], resume_text: str = "") -> str:
    """The whole prompt, ending where the assistant's reply begins.

    ``resume_text`` is reply text an earlier attempt already streamed; the
    model continues after it.
    """
    return "".join(render_message(m) for m in messages) + f"{START}assistant\n" + _neutralise(resume_text)
