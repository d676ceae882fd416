"""Prompt building: a branch of the tree → the messages a model sees.

Pure: the context builder hands it the branch that ends at the user message
being answered and gets back the prompt, newest turns kept first under the
token budget, in chronological order. Tokens are estimated from characters
(about four per token for English text) until an engine tokenizer is wired
in; the estimate only has to be good enough to stay under the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.events import PromptMessage
from streams.tree import Message

CHARS_PER_TOKEN = 4
#: Chat templates wrap every message in a few tokens of framing (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)  # ceil: never under-count a short message


def message_tokens(role: str, content: str) -> int:
    return estimate_tokens(content) + MESSAGE_OVERHEAD_TOKENS


@dataclass(frozen=True)
class Prompt:
    messages: list[PromptMessage]
    prompt_tokens: int
    #: Messages of the branch left out because the budget ran out (oldest ones).
    dropped: int


def _usable(m: Message) -> bool:
    # A failed or rejected reply carries no text worth showing the model; a
    # cancelled one keeps the partial text the user saw.
    return bool(m.content) and m.role in ("user", "assistant", "system")


def build_prompt(system_prompt: str, branch: Sequence[Message], budget_tokens: int) -> Prompt:
    """The prompt for the turn that ends ``branch``.

    The system prompt comes first and always counts. Then the branch is walked
    from its newest message back while the next one still fits; the walk stops
    at the first that does not, so the prompt is always a contiguous tail of
    the conversation. The newest message (the question being answered) is kept
    even when it alone exceeds the budget: answering without it would be
    wrong, and the estimate says so in ``prompt_tokens`` for admission to act on.
    """
    head: list[PromptMessage] = []
    used = 0
    if system_prompt:
        head.append(PromptMessage(role="system", content=system_prompt))
        used += message_tokens("system", system_prompt)
    usable = [m for m in branch if _usable(m)]
    kept: list[PromptMessage] = []
    for i, m in enumerate(reversed(usable)):
        cost = message_tokens(m.role, m.content)
        if i > 0 and used + cost > budget_tokens:
            break
        kept.append(PromptMessage(role=m.role, content=m.content))
        used += cost
    kept.reverse()
    return Prompt(messages=head + kept, prompt_tokens=used, dropped=len(usable) - len(kept))
