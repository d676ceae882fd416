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
``TokenCounter.prompt`` counts a whole prompt the same way, from the cached
counts of its messages, where the template renders a prompt as its messages'
renderings one after the other (ChatML): only text not seen before (the new
question, the last reply, a new summary) is tokenised on a turn. That sum is
exact for the engines' tokenizers, which split the template's control tokens
out before anything else (``tests/unit/streams/test_context_tokens.py`` holds
it to that), and an upper bound for the synthetic backend's word tokenizer
(the newline that ends a message joins the next ``<`` there). For a family
whose rendering is not a concatenation (Llama-3's system block, DeepSeek's
hoisted system messages) the prompt is tokenised whole.

Counting is CPU work: the builder runs it in its one counting thread
(``streams.context``), never on the event loop. The cache is shared with the
document search, which counts passages on the loop, so it takes a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

from parley.errors import ConfigError
from parley.lru import LRU
from schemas.events import PromptMessage
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
        self._lock = threading.Lock()
        #: Whether a prompt renders as its messages one after the other, then the reply's opening.
        self.additive = _renders_additively(template)

    @classmethod
    def from_spec(cls, spec: str, template: ChatTemplate = CHATML) -> TokenCounter:
        return cls(load_tokenizer(spec), template)

    def count(self, text: str) -> int:
        """Tokens of a whole prompt, as the engine will count it."""
        return len(self._encode(text))

    def segment(self, text: str) -> int:
        """Tokens ``text`` adds as one piece of a longer prompt."""
        with self._lock:
            known = self._segments.get(text)
        if known is None:
            known = max(0, len(self._encode(text)) - self.overhead)
            with self._lock:
                self._segments.put(text, known)
        return known

    def prompt(self, messages: Sequence[PromptMessage]) -> int:
        """Tokens of the prompt ``messages`` render to: from the cached counts of its messages where the
        template is additive, else the rendered prompt tokenised whole."""
        if not self.additive:
            return self.count(self.template.render_prompt(messages))
        render = self.template.render_message
        return self.overhead + sum(self.segment(render(m)) for m in messages) + self.segment(self.template.render_prompt([]))


def _renders_additively(template: ChatTemplate) -> bool:
    """Whether ``template`` renders a prompt as ``render_message`` of each message, then ``render_prompt([])``
    (a property of the family's rendering: tried on a system, a user and an assistant message)."""
    sample = [PromptMessage(role=r, content=f" {r} text ") for r in ("system", "user", "assistant", "user")]
    pieces = "".join(template.render_message(m) for m in sample) + template.render_prompt([])
    return template.render_prompt(sample) == pieces
