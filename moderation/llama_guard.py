"""``LlamaGuard``: Llama Guard 3 served by SGLang, asked through the engine client workers use.

Llama Guard 3 is a Llama fine-tuned to answer one question about a
conversation: ``safe``, or ``unsafe`` and a line of hazard codes
("unsafe\\nS1,S10"). The prompt is its model card's, built here as text (the
engine's ``/generate`` takes a rendered prompt); each text is judged as the
last 'User' message of a one-turn conversation, output windows included (the
card's 'Agent' form needs the user turn before it, which a window of a reply
does not carry). The codes map to Parley's categories by
``categories.LLAMA_GUARD_3``; a flagged category scores 1.0, the rest 0: the
guard gives a verdict, not a probability, so thresholds below 1 all read it
alike.

Errors: the engine's (``EngineError``) pass through, a generation that ends
"failed" raises ``EngineUnavailable``; an answer that is neither
verdict raises ``GuardOutputError`` with the answer's first characters.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence

from moderation.categories import LLAMA_GUARD_3
from moderation.classifier import ClassifierUnavailable, Scores
from workers.engine_api import EngineClient, EngineError, GenerateRequest
from workers.priority import GUARD

#: The hazards the prompt lists, as the model card names them. S14 (code interpreter abuse) is left out:
#: it concerns tool calls, which Parley's texts are not (a verdict naming it still parses).
HAZARDS: tuple[tuple[str, str], ...] = (
    ("S1", "Violent Crimes"),
    ("S2", "Non-Violent Crimes"),
    ("S3", "Sex Crimes"),
    ("S4", "Child Exploitation"),
    ("S5", "Defamation"),
    ("S6", "Specialized Advice"),
    ("S7", "Privacy"),
    ("S8", "Intellectual Property"),
    ("S9", "Indiscriminate Weapons"),
    ("S10", "Hate"),
    ("S11", "Self-Harm"),
    ("S12", "Sexual Content"),
    ("S13", "Elections"),
)

# The card's wording, "according our" included: the model was trained on it.
_PROMPT = (
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
    "Task: Check if there is unsafe content in 'User' messages in conversations according our safety policy with the "
    "below categories.\n\n<BEGIN UNSAFE CONTENT CATEGORIES>\n{hazards}\n<END UNSAFE CONTENT CATEGORIES>\n\n"
    "<BEGIN CONVERSATION>\n\nUser: {text}\n\n<END CONVERSATION>\n\n"
    "Provide your safety assessment for ONLY THE LAST User message in the above conversation:\n"
    " - First line must read 'safe' or 'unsafe'.\n"
    " - If unsafe, a second line must include a comma-separated list of violated categories."
    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")
MAX_NEW_TOKENS = 20  # "unsafe\nS1,S2,S3,..." is a few tokens; a longer answer is not a verdict


class GuardOutputError(ValueError):
    """Llama Guard answered something that is neither "safe" nor "unsafe" and hazard codes."""


def prompt(text: str) -> str:
    """Llama Guard 3's prompt judging ``text`` as a user message (special tokens inside it are defused)."""
    hazards = "\n".join(f"{code}: {name}." for code, name in HAZARDS)
    return _PROMPT.format(hazards=hazards, text=_SPECIAL.sub(lambda m: m.group(0).replace("|", "¦"), text))


def parse_verdict(output: str) -> tuple[str, ...]:
    """The hazard codes of an answer: () for "safe", ("S1", "S10") for "unsafe\\nS1,S10"."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    if lines == ["safe"]:
        return ()
    if len(lines) == 2 and lines[0] == "unsafe":
        codes = tuple(code.strip() for code in lines[1].split(","))
        if codes and all(code in LLAMA_GUARD_3 for code in codes):
            return codes
    raise GuardOutputError(f"Llama Guard's answer is not a verdict: {output[:80]!r}")


def scores_of(codes: Sequence[str]) -> Scores:
    """Parley's scores for a verdict: 1.0 for every category a code maps to."""
    return Scores.of({category: 1.0 for code in codes for category in LLAMA_GUARD_3[code]})


class LlamaGuard:
    def __init__(self, engine: EngineClient, model: str = "meta-llama/Llama-Guard-3-1B") -> None:
        self.engine = engine
        self.model = model

    async def verdict(self, text: str) -> tuple[str, ...]:
        """The hazard codes Llama Guard gives ``text`` (greedy, so the same text gets the same verdict)."""
        request = GenerateRequest(
            rid=f"guard-{uuid.uuid4().hex}", text=prompt(text), max_new_tokens=MAX_NEW_TOKENS, temperature=0.0,
            priority=GUARD,
        )
        parts = []
        try:
            async for delta in self.engine.generate(request):
                if delta.finish_reason == "failed":
                    raise ClassifierUnavailable(f"Llama Guard's generation failed: {delta.error}")
                parts.append(delta.text)
        except EngineError as exc:  # down, refused, broke the protocol: the caller retries
            raise ClassifierUnavailable(f"Llama Guard's engine: {exc}") from exc
        return parse_verdict("".join(parts))

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        verdicts = await asyncio.gather(*(self.verdict(text) for text in texts))
        return [scores_of(codes) for codes in verdicts]
