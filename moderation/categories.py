"""The moderation categories Parley scores, in OpenAI's shape, and Llama Guard 3's hazards mapped onto them.

OpenAI's moderation endpoint (``omni-moderation``) names thirteen categories,
some with a sub-category after a slash; a client that reads OpenAI's
``categories`` / ``category_scores`` reads Parley's unchanged. A score for a
sub-category counts for its parent too (``Scores.of``): "violence/graphic" is
violence.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: OpenAI's categories, in OpenAI's order (every ``Scores`` has all of them).
CATEGORIES: tuple[str, ...] = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)

#: Llama Guard 3's hazard codes (the MLCommons taxonomy, as its model card lists them) → Parley's categories.
#: An empty tuple: a hazard OpenAI's categories have no place for; the guard may say "unsafe" for it and the
#: result is still unflagged (the raw codes are kept on ``LlamaGuard``'s verdicts for review).
LLAMA_GUARD_3: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "S1": ("violence", "illicit/violent"),  # violent crimes
        "S2": ("illicit",),  # non-violent crimes (fraud, theft, drugs, hacking)
        "S3": ("sexual", "illicit/violent"),  # sex-related crimes (assault, trafficking)
        "S4": ("sexual/minors",),  # child sexual exploitation
        "S5": (),  # defamation: no OpenAI category
        "S6": (),  # specialised (financial, medical, legal) advice: no OpenAI category
        "S7": (),  # privacy: personal data is moderation/pii.py's concern, not a category
        "S8": (),  # intellectual property: no OpenAI category
        "S9": ("illicit/violent",),  # indiscriminate weapons (chemical, biological, nuclear, explosives)
        "S10": ("hate",),
        "S11": ("self-harm",),  # suicide and self-harm
        "S12": ("sexual",),  # sexual content
        "S13": (),  # elections misinformation: no OpenAI category
        "S14": ("illicit",),  # code interpreter abuse (denial of service, escapes): cyber crime
    }
)


def parent(category: str) -> str:
    """The category a sub-category belongs to ("violence/graphic" → "violence"); a parent is its own."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown moderation category {category!r} (known: {', '.join(CATEGORIES)})")
    return category.split("/", 1)[0]
