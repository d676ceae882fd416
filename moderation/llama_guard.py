"""Llama Guard 3 as a moderation classifier, served by SGLang and called through the workers' engine client.

The production classifier: a safety model on the small pool (Llama Guard 3 1B
is enough for a first line; 8B where precision matters). It is prompted with
its own template (the conversation to classify, the hazard categories S1–S14)
and answers ``safe`` or ``unsafe`` then the codes, e.g. ``S1,S10``; each code
maps onto Parley's categories (moderation/categories.py). It gives no
probabilities, so a flagged category scores 1.0 and the rest 0.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence

from moderation.categories import LLAMA_GUARD_3
from moderation.classifier import ClassifierUnavailable, Scores, scores_of
from workers.engine_api import EngineClient, EngineError, GenerateRequest

HAZARDS = (
    ("S1", "Violent Crimes."), ("S2", "Non-Violent Crimes."), ("S3", "Sex Crimes."), ("S4", "Child Exploitation."),
    ("S5", "Defamation."), ("S6", "Specialized Advice."), ("S7", "Privacy."), ("S8", "Intellectual Property."),
    ("S9", "Indiscriminate Weapons."), ("S10", "Hate."), ("S11", "Self-Harm."), ("S12", "Sexual Content."),
    ("S13", "Elections."), ("S14", "Code Interpreter Abuse."),
)  # fmt: skip
_VERDICT = re.compile(r"^\s*(safe|unsafe)\s*(?:\n\s*((?:S\d{1,2})(?:\s*,\s*S\d{1,2})*))?\s*$", re.I)


class GuardOutputError(ValueError):
    """The model answered something that is not Llama Guard's verdict."""


def prompt(text: str, role: str = "User") -> str:
    """Llama Guard 3's classification prompt for one message (its model card's template)."""
    categories = "\n".join(f"{code}: {name}" for code, name in HAZARDS)
    return (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
        f"Task: Check if there is unsafe content in '{role}' messages in conversations according our safety policy "
        "with the below categories.\n\n<BEGIN UNSAFE CONTENT CATEGORIES>\n"
        f"{categories}\n<END UNSAFE CONTENT CATEGORIES>\n\n<BEGIN CONVERSATION>\n\n{role}: {text}\n\n<END CONVERSATION>\n\n"
        f"Provide your safety assessment for ONLY THE LAST {role} message in the above conversation:\n"
        " - First line must read 'safe' or 'unsafe'.\n"
        " - If unsafe, a second line must include a comma-separated list of violated categories."
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def parse(output: str) -> Scores:
    """``safe`` → all zero; ``unsafe\\nS1,S10`` → 1.0 for each mapped category. Anything else raises."""
    m = _VERDICT.match(output)
    if m is None:
        raise GuardOutputError(f"not a Llama Guard verdict: {output[:80]!r}")
    if m.group(1).lower() == "safe":
        return scores_of({})
    codes = [c.strip().upper() for c in (m.group(2) or "").split(",") if c.strip()]
    unknown = [c for c in codes if c not in LLAMA_GUARD_3]
    if unknown:
        raise GuardOutputError(f"unknown hazard codes {unknown}")
    return scores_of({category: 1.0 for code in codes for category in LLAMA_GUARD_3[code]})


class LlamaGuard:
    def __init__(self, engine: EngineClient, model: str = "meta-llama/Llama-Guard-3-1B") -> None:
        self._engine = engine
        self.model = model

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return list(await asyncio.gather(*(self._one(t) for t in texts)))

    async def _one(self, text: str) -> Scores:
        request = GenerateRequest(rid=f"guard-{uuid.uuid4().hex}", text=prompt(text), max_new_tokens=16, temperature=0.0)
        out = []
        try:
            async for delta in self._engine.generate(request):
                out.append(delta.text)
        except EngineError as exc:
            raise ClassifierUnavailable(f"the safety model's engine failed: {exc}") from exc
        return parse("".join(out))
