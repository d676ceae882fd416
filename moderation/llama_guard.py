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

Errors are all ``ClassifierUnavailable`` (a failed check, tried again by
``classifier.judge``, never a pass): the engine's own (``EngineError``: down,
an HTTP error, a timeout, a broken stream), a generation that ends "failed",
and ``GuardOutputError`` for an answer that is not a verdict: empty, garbled,
a hazard code the card does not have, or one that did not end "stop" (cut
short by the token cap or aborted, it may have lost codes: "S1" from "S10").
The error says which, never the answer's text (it may echo the text judged).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence

from moderation.categories import LLAMA_GUARD_3
from moderation.classifier import ClassifierUnavailable, NotAVerdict, Scores
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
#: Room for "unsafe" and every code (~3 tokens each); an answer that does not end within it is not a verdict.
MAX_NEW_TOKENS = 64
_CODE = re.compile(r"S\d{1,2}")


class GuardOutputError(NotAVerdict):
    """Llama Guard answered something that is neither "safe" nor "unsafe" and hazard codes."""


def prompt(text: str) -> str:
    """Llama Guard 3's prompt judging ``text`` as a user message (special tokens inside it are defused)."""
    hazards = "\n".join(f"{code}: {name}." for code, name in HAZARDS)
    return _PROMPT.format(hazards=hazards, text=_SPECIAL.sub(lambda m: m.group(0).replace("|", "¦"), text))


def parse_verdict(output: str) -> tuple[str, ...]:
    """The hazard codes of an answer: () for "safe", ("S1", "S10") for "unsafe\\nS1,S10"; else ``GuardOutputError``."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    if lines == ["safe"]:
        return ()
    if not lines:
        why = "an empty answer"
    elif lines[0] not in ("safe", "unsafe"):
        why = "a first line that is neither 'safe' nor 'unsafe'"
    elif lines[0] == "safe" or len(lines) > 2:
        why = f"{len(lines)} lines after {lines[0]!r}"
    elif len(lines) == 1:
        why = "'unsafe' without hazard codes"
    else:
        codes = tuple(code.strip() for code in lines[1].split(","))
        unknown = [code for code in codes if code not in LLAMA_GUARD_3]
        if not unknown:
            return codes
        # A code-shaped unknown is named (it is the model's, not the user's); anything else is only counted.
        named = sorted({code for code in unknown if _CODE.fullmatch(code)})
        why = f"hazard codes the card does not have ({', '.join(named) or 'none code-shaped'}; {len(unknown)} in all)"
    raise GuardOutputError(f"Llama Guard's answer is not a verdict: {why}")


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
        parts, finish = [], None
        try:
            async for delta in self.engine.generate(request):
                if delta.finish_reason == "failed":
                    raise ClassifierUnavailable(f"Llama Guard's generation failed: {delta.error}")
                parts.append(delta.text)
                finish = delta.finish_reason or finish
        except EngineError as exc:  # down, refused, broke the protocol: the caller retries
            raise ClassifierUnavailable(f"Llama Guard's engine: {exc}") from exc
        if finish != "stop":  # cut at the token cap, aborted, or a stream with no ending: maybe codes lost
            raise GuardOutputError(f"Llama Guard's answer is not a verdict: it ended {finish or 'without a finish reason'}")
        return parse_verdict("".join(parts))

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        verdicts = await asyncio.gather(*(self.verdict(text) for text in texts))
        return [scores_of(codes) for codes in verdicts]
