"""The moderation categories, in OpenAI's moderation shape, and Llama Guard 3's hazard codes mapped onto them.

Every classifier answers in these names so a policy, a ModerationResult and
``POST /v1/moderations`` mean the same thing whichever model scored the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: OpenAI's moderation categories, in OpenAI's order (``omni-moderation``).
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

#: Llama Guard 3's hazard taxonomy (MLCommons S1–S14) → the categories above. Empty where OpenAI's
#: shape has no category for the hazard: S6 (specialized advice), S7 (privacy: PII detection's
#: business), S8 (intellectual property) and S13 (elections) are recorded by code only.
LLAMA_GUARD_3: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "S1": ("violence", "illicit/violent"),  # violent crimes
        "S2": ("illicit",),  # non-violent crimes
        "S3": ("sexual", "illicit"),  # sex-related crimes
        "S4": ("sexual/minors",),  # child sexual exploitation
        "S5": ("harassment",),  # defamation
        "S6": (),  # specialized advice
        "S7": (),  # privacy
        "S8": (),  # intellectual property
        "S9": ("illicit/violent", "violence"),  # indiscriminate weapons (CBRNE)
        "S10": ("hate",),  # hate
        "S11": ("self-harm", "self-harm/intent"),  # suicide and self-harm
        "S12": ("sexual",),  # sexual content
        "S13": (),  # elections
        "S14": ("illicit",),  # code interpreter abuse
    }
)


def parent(category: str) -> str:
    """``violence/graphic`` → ``violence``; a top-level category is its own parent."""
    return category.split("/", 1)[0]


def check(category: str) -> str:
    """``category`` if it is one of CATEGORIES, else ValueError naming the choices."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown moderation category {category!r}; categories are {', '.join(CATEGORIES)}")
    return category
