"""Counting prompt text in the engine's own tokens.

The budget is a promise about what the engine will see, so it is counted with
the engine's tokenizer (``workers.engine.tokenizer``), on the text a worker
renders (``workers.chat_template``), never estimated from characters. The
counter holds one tokenizer and one template, the default pool's
(PARLEY_CONTEXT_TOKENIZER, PARLEY_POOL_TEMPLATES): the prompt is built before
the router picks a pool, so a turn routed elsewhere is counted in the default
pool's terms, and the pools' PARLEY_ROUTER_CONTEXT_TOKENS keep a margin for it
(docs/fleet.md).

``TokenCounter.segment`` counts one piece of a prompt (a rendered message)
without the tokens the tokenizer adds around every ``encode`` call (a BOS):
the pieces of a prompt then add up to the whole, which lets the prompt builder
weigh windows with prefix sums instead of re-tokenising the history for each.
The builder still counts the final prompt once, whole, before it trusts it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from parley.errors import ConfigError
from parley.lru import LRU
from workers.chat_template import CHATML, ChatTemplate
from workers.engine.tokenizer import ByteTokenizer, Tokenizer, WordTokenizer, local_tokenizer

#: Distinct message texts whose counts are remembered: a conversation's history is
#: re-counted on every turn, and for a BPE tokenizer that is the builder's main cost.
_CACHE_ENTRIES = 50_000


def load_tokenizer(spec: str) -> Tokenizer:
    """``smollm2``, ``bytes``, ``words`` or the path of a local HuggingFace model directory (PARLEY_CONTEXT_TOKENIZER)."""
    if spec == "bytes":
        return ByteTokenizer()
    if spec == "words":
        return WordTokenizer()
    if spec == "smollm2":  # the CPU engine's default model: its tokenizer, from the one converted copy
        from infra.local.settings import LocalInfraSettings
        from parley.settings import from_env
        from workers.engine import packaged_model

        return local_tokenizer(packaged_model.model_dir(from_env(LocalInfraSettings).cache_dir))
    path = Path(spec).expanduser()
    if not (path / "tokenizer_config.json").is_file() and not (path / "tokenizer.json").is_file():
        raise ConfigError(
            f"PARLEY_CONTEXT_TOKENIZER={spec!r} is neither 'smollm2', 'bytes', 'words' nor a HuggingFace model directory "
            "(no tokenizer.json or tokenizer_config.json there)"
        )
    return local_tokenizer(path)


class TokenCounter:
    """Token counts of prompt text under one tokenizer, rendered in one chat template."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate = CHATML) -> None:
        self.template = template
        self._encode: Callable[[str], list[int]] = tokenizer.encode
        #: Tokens ``encode`` adds to any text (a BOS): counted once per prompt, not per piece.
        self.overhead = len(self._encode(""))
        self._segments: LRU[str, int] = LRU(_CACHE_ENTRIES)

    @classmethod
    def from_spec(cls, spec: str, template: ChatTemplate = CHATML) -> TokenCounter:
        return cls(load_tokenizer(spec), template)

    def count(self, text: str) -> int:
        """Tokens of a whole prompt, as the engine will count it."""
        return len(self._encode(text))

    def segment(self, text: str) -> int:
        """Tokens ``text`` adds as one piece of a longer prompt."""
        known = self._segments.get(text)
        if known is None:
            known = max(0, len(self._encode(text)) - self.overhead)
            self._segments.put(text, known)
        return known
