"""Retrieved text that talks to the assistant: prompt-injection rules for document passages.

A passage is data the user brought, not instructions; the prompt already
quotes it under a header that says so (streams/prompt.py). This flags the
passages that try anyway ("ignore all previous instructions", a fake system
turn, a request to send the conversation somewhere), so the prompt can label
them and the turn records it. Rules, not a model: the one offline classifier
found (metatronnanoguard) ships a pickled tokenizer, which is code we would
have to run from an anonymous package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from moderation.rules import normalise


@dataclass(frozen=True)
class Injection:
    rule: str
    score: float


_ON_NORMALISED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("ignore_instructions", r"\b(?:ignore|disregard|forget|override|bypass) (?:all |any |the |your |my )?(?:previous |prior |above |earlier |preceding |original |system )*(?:instructions|prompts?|rules|directions|guidelines|messages|context)\b"),
        ("ignore_instructions", r"\bdisregard (?:everything|all) (?:above|before|said)\b"),
        ("new_role", r"\b(?:you are now|from now on you are|pretend (?:to be|you are)|act as) (?:a |an |the )?(?:dan|jailbroken|unrestricted|unfiltered|evil|developer mode|different (?:ai|assistant))\b"),
        ("new_role", r"\benable (?:developer|god|jailbreak|dan) mode\b"),
        ("reveal_prompt", r"\b(?:reveal|print|show|repeat|output|leak) (?:your |the )?(?:system prompt|hidden instructions|initial instructions|instructions above)\b"),
        ("addressed_to_assistant", r"\b(?:note to|attention|instructions? for) (?:the )?(?:ai|assistant|language model|llm|chatbot)\b"),
        ("exfiltrate", r"\b(?:send|post|upload|forward|email|transmit) (?:the |this |all |your )?(?:conversation|chat history|user s data|system prompt|api key|credentials|messages) to\b"),
    )
)
_ON_RAW: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("role_tags", re.compile(r"<\|im_start\|>|<\|system\|>|\[/?INST\]|<<SYS>>|^\s*#{2,}\s*(?:system|instruction)s?\b", re.I | re.M)),
    ("exfiltrate", re.compile(r"!\[[^\]]*\]\(https?://[^)\s]*\?[^)\s]*=", re.I)),  # a markdown image that would carry data out
)


def detect(text: str) -> Injection | None:
    """The first rule ``text`` matches, or None."""
    for name, pattern in _ON_RAW:
        if pattern.search(text):
            return Injection(name, 0.9)
    flat = normalise(text)
    for name, pattern in _ON_NORMALISED:
        if pattern.search(flat):
            return Injection(name, 0.9)
    return None
