"""Prompt injection in retrieved text: instructions aimed at the assistant, hidden in a document or page.

A document attached to a turn is data; text in it that talks to the model
("ignore previous instructions", a fake system turn, "send the conversation
to https://…") is an attack on the turn that retrieves it. ``detect`` finds
the common shapes by rule and names the rule.

Rules, not a model: the one classifier that runs offline and small enough
(metatronnanoguard) ships its tokenizer as a pickle, and unpickling a file is
running its author's code. Rules miss paraphrase and other languages; what
they catch, they catch for a reason a reviewer can read.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class Injection:
    rule: str  # which rule matched (below)
    score: float  # how sure the rule is, 0..1: a role tag is surer than "you are now"


_I = re.IGNORECASE | re.MULTILINE
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))

_SEND = r"(?:send|post|upload|forward|transmit|exfiltrate|email|leak|submit|append)"
_PRIVATE = (
    r"(?:conversation|chat|history|messages?|user'?s|passwords?|credentials|api\s+keys?|secrets?|tokens?|the\s+above|"
    r"context|personal\s+(?:data|information|details)|system\s+prompt|everything)"
)
_ADDRESS = r"(?:https?://|[\w.+-]+@[\w-]+\.)"

#: (rule, score, pattern), checked in order; the highest score that matches is returned.
RULES: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    ("role tag", 0.95, re.compile(
        r"<\|(?:im_start|im_end|system|user|assistant|begin_of_text|start_header_id|end_header_id|eot_id|endoftext)\|>"
        r"|\[/?INST\]|<</?SYS>>|^\s*#{2,}\s*(?:instruction|instructions|system|response|new instructions?)\s*:?\s*$", _I)),
    ("ignore previous", 0.95, re.compile(
        r"\b(?:ignore|disregard|forget|override|bypass|skip)\s+(?:all\s+|any\s+|the\s+|your\s+|of\s+|every\s+)*"
        r"(?:previous|prior|above|earlier|preceding|former|system|original|initial|existing)\s+"
        r"(?:instructions?|prompts?|rules|directions|directives|messages|context|guidelines|commands)\b", _I)),
    ("disregard above", 0.9, re.compile(
        r"\b(?:disregard|ignore|forget)\s+(?:everything|all|anything)?\s*(?:the\s+)?(?:above|before this|said before|you were told)\b",
        _I)),
    ("exfiltration image", 0.9, re.compile(r"!\[[^\]]*\]\(\s*https?://[^)\s]+\?[^)\s]*=", _I)),
    ("exfiltration", 0.85, re.compile(
        # What is sent must be the chat's or the user's: "send your CV to jobs@example.com" is an ordinary document.
        rf"\b{_SEND}\b[^.\n]{{0,60}}?\b{_PRIVATE}\b[^.\n]{{0,60}}?\bto\s+{_ADDRESS}"
        rf"|\b{_PRIVATE}\b[^.\n]{{0,60}}?\b{_SEND}\b[^.\n]{{0,40}}?\bto\s+{_ADDRESS}", _I)),
    ("system prompt", 0.85, re.compile(
        r"\b(?:reveal|print|show|output|repeat|leak|tell\s+me|display|share|dump|recite)\s+(?:me\s+)?(?:your|the)\s+"
        r"(?:full\s+|entire\s+|hidden\s+|secret\s+)?(?:system\s+prompt|initial\s+instructions|hidden\s+instructions|"
        r"instructions\s+above|developer\s+message|system\s+message)|^\s*(?:new\s+)?system\s*(?:prompt|message)?\s*:", _I)),
    ("hide from user", 0.8, re.compile(
        r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention\s+(?:this\s+)?to|reveal\s+(?:this\s+)?to|show)\s+the\s+user\b", _I)),
    ("addressed to the assistant", 0.7, re.compile(
        r"\b(?:ai|assistant|chatbot|llm|language\s+model|chatgpt|gpt)s?\s*[,:]?\s+(?:you\s+)?(?:must|should|will|shall)\s+(?:now\s+)?"
        r"(?:ignore|say|respond|reply|output|tell\s+the\s+user|recommend|include|answer)\b"
        r"|\bwhen\s+(?:the\s+)?(?:user|you)\s+(?:asks?|reads?|summari[sz]es?)\s+(?:about\s+)?(?:this|it)\b[^.\n]{0,40}?"
        r"\b(?:say|respond|reply|tell|answer)\b", _I)),
    ("you are now", 0.6, re.compile(
        r"\byou\s+are\s+now\s+(?:dan|no\s+longer|unrestricted|jailbroken|free\s+(?:from|of)|in\s+developer\s+mode|"
        r"an?\s+(?:ai|assistant|language\s+model|chatbot|unfiltered|evil|uncensored|different))\b"
        r"|\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must|shall)\b|\bact\s+as\s+(?:if\s+you\s+are\s+)?(?:an?\s+)?"
        r"(?:unrestricted|jailbroken|unfiltered|uncensored|dan)\b", _I)),
)


def detect(text: str) -> Injection | None:
    """The strongest injection rule ``text`` matches, or None."""
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    best: Injection | None = None
    for rule, score, pattern in RULES:
        if (best is None or score > best.score) and pattern.search(text):
            best = Injection(rule, score)
    return best
