"""Constrained decoding: SGLang's ``json_schema``, ``regex`` and ``ebnf`` sampling params, with llguidance.

A request that sends one gets a ``Constraint``: an llguidance matcher over the
model's vocabulary. Each step the torch backend asks it which tokens may come
next (``allowed``: a bitmask, one bit per token, unpacked to the logits' width),
masks the rest to -inf before sampling, and hands it the token it sampled
(``advance``). When the grammar can take nothing more the reply ends (as
SGLang's ``Req.check_finished`` does on ``grammar.is_terminated()``).

What each kind means is what SGLang's llguidance backend makes of it
(``--grammar-backend llguidance``): a JSON Schema (as JSON text), a regular
expression (Rust regex syntax), or a GBNF/EBNF grammar (llama.cpp's, as
xgrammar reads it; llguidance converts it to its Lark dialect). JSON is
compiled without free whitespace (SGLang's ``--disable-any-whitespace``): a
135M model allowed any whitespace between tokens spends its reply on newlines.

The synthetic backend has no model: ``instance`` walks the same grammar over a
byte vocabulary and picks each byte from those allowed (closing brackets and
quotes first, then plain letters and digits), deterministically in a seed, so
its reply is valid against the schema too, never free text passed off as JSON.

Why llguidance and not xgrammar (SGLang's default): it is one 8 MB wheel with
no dependencies (xgrammar needs torch, triton and transformers, 5 GB where
they are not already installed), it takes the same three kinds, and SGLang
ships it as one of its grammar backends (docs/design.md §4 has the measurements).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import llguidance
import numpy as np
import torch

from workers.engine.protocol import GRAMMAR_KINDS, Grammar, InvalidRequest

#: How JSON Schemas are compiled: no free whitespace, and the separators ``json.dumps`` writes.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
#: Bytes the synthetic walk may take before it gives up on a grammar that does not end (a reply's worth).
INSTANCE_MAX_BYTES = 4096
_CLOSERS = frozenset(b'"}]')
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")


def definition(grammar: Grammar) -> str:
    """The llguidance grammar for ``grammar``; raises InvalidRequest when it cannot be read."""
    if grammar.kind not in GRAMMAR_KINDS:
        raise InvalidRequest(f"unknown grammar kind {grammar.kind!r}")
    try:
        if grammar.kind == "json_schema":
            schema = json.loads(grammar.text)
            if not isinstance(schema, (dict, bool)):
                raise ValueError("a JSON Schema is an object or a boolean")
            text = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=JSON_OPTIONS)  # type: ignore[arg-type]
        elif grammar.kind == "structural_tag":
            text = _structural_tag(grammar.text)
        else:
            text = llguidance.grammar_from(grammar.kind, grammar.text)  # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(f"Invalid grammar request: {grammar.kind} cannot be read: {exc}") from None
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text)
    if failed:
        raise InvalidRequest(f"Invalid grammar request: {grammar.kind}: {messages[0].strip()}")
    return text


def _structural_tag(text: str) -> str:
    """SGLang's ``structural_tag`` (``{"structures": [{"begin", "schema", "end"}], "triggers": […]}``) as an
    llguidance grammar: free text, and from each trigger on one of the structures that begin with it, its
    arguments held to its schema (llguidance's ``StructTag``, lazy triggers). Triggers are text here, never
    special tokens: the CPU engine's models write their tool markup as text."""
    value = json.loads(text)
    structures, triggers = (value.get("structures"), value.get("triggers")) if isinstance(value, dict) else (None, None)
    if not isinstance(structures, list) or not structures or not isinstance(triggers, list) or not triggers:
        raise ValueError("a structural tag has a list of structures and a list of triggers")
    tags = []
    for structure in structures:
        begin, schema, end = (structure.get(k) for k in ("begin", "schema", "end")) if isinstance(structure, dict) else (None,) * 3
        if not isinstance(begin, str) or not isinstance(end, str) or not isinstance(schema, dict):
            raise ValueError("each structure has a begin and an end (text) and a schema (an object)")
        trigger = next((t for t in triggers if isinstance(t, str) and t and begin.startswith(t)), None)
        if trigger is None:
            raise ValueError("each structure's begin starts with one of the triggers")
        schema = {**schema, "x-guidance": dict(JSON_OPTIONS)}  # Parley's JSON options, whatever the schema says
        tags.append(llguidance.StructTag(trigger=trigger, begin=begin, grammar=schema, end=end))
    return llguidance.StructTag.to_grammar(tags, assume_special=False)


def hf_tokenizer(hf: Any, eos_ids: Sequence[int]) -> llguidance.LLTokenizer:
    """llguidance's view of a HuggingFace fast tokenizer (under a second for SmolLM2's 49,152 tokens: once
    per load).

    A byte-level BPE vocabulary (GPT-2's, SmolLM2's, Llama-3's, Qwen's) is handed over token by token, as
    the bytes each token stands for: llguidance reads the vocabulary's kind from ``tokenizer.json``, and a
    GGUF-converted one (the packaged SmolLM2's: a ByteFallback decoder before the ByteLevel one) reads to it
    as SentencePiece, so ``Ġ`` would be a letter and no token would hold a space."""
    import llguidance.hf

    eos = sorted(eos_ids) or None
    if not _byte_level(json.loads(hf.backend_tokenizer.to_str())):
        return llguidance.hf.from_tokenizer(hf, eos_token=eos)
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteLevelVocabulary(hf, eos or [])), eos_token=eos)


def _byte_level(spec: dict[str, Any]) -> bool:
    """Whether a ``tokenizer.json`` pre-tokenizes to GPT-2's byte alphabet (its ByteLevel step, alone or in a sequence)."""
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    return any(isinstance(step, dict) and step.get("type") == "ByteLevel" for step in steps)


def _gpt2_alphabet() -> dict[str, int]:
    """GPT-2's byte ↔ printable character table (``bytes_to_unicode``), read backwards: character → byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + extra)] = byte
            extra += 1
    return table


class _ByteLevelVocabulary:
    """A byte-level BPE tokenizer as llguidance's TokenizerWrapper asks for it: each token's bytes, the specials."""

    bos_token_id = None

    def __init__(self, hf: Any, eos: Sequence[int]) -> None:
        alphabet = _gpt2_alphabet()
        added = {int(i): t for i, t in hf.added_tokens_decoder.items()}
        self.tokens: list[bytes] = []
        for i, piece in enumerate(hf.convert_ids_to_tokens(list(range(len(hf))))):
            if i in added or piece is None or any(c not in alphabet for c in piece):
                self.tokens.append((piece or "").encode("utf-8"))
            else:
                self.tokens.append(bytes(alphabet[c] for c in piece))
        self.special_token_ids = sorted(i for i, t in added.items() if t.special)
        self.eos_token_id = eos[0] if eos else (hf.eos_token_id or 0)
        self._hf = hf

    def __call__(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError("text, not bytes")  # how TokenizerWrapper learns to hand over str
        return list(self._hf.encode(text, add_special_tokens=False))


class _ByteVocabulary:
    """Tokens 0..255 are bytes, then the specials: what llguidance's TokenizerWrapper asks of a tokenizer."""

    bos_token_id = None

    def __init__(self, specials: Sequence[bytes], eos: int) -> None:
        self.tokens = [bytes([i]) for i in range(256)] + list(specials)
        self.eos_token_id = eos
        self.special_token_ids = list(range(256, 256 + len(specials)))

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


def byte_tokenizer(specials: Sequence[bytes] = (b"<s>", b"</s>", b"<pad>"), eos: int = 257) -> llguidance.LLTokenizer:
    """A byte-level vocabulary (the random model's ByteTokenizer by default)."""
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary(specials, eos)))


class Constraint:
    """One request's grammar, advanced token by token (on the batcher thread only)."""

    def __init__(self, grammar: Grammar, tokenizer: llguidance.LLTokenizer) -> None:
        self.grammar = grammar
        self._matcher = llguidance.LLMatcher(tokenizer, definition(grammar), log_level=0)
        if self._matcher.is_error():
            raise InvalidRequest(f"Invalid grammar request: {grammar.kind}: {self._matcher.get_error()}")
        self._vocab = tokenizer.vocab_size

    def allowed(self, width: int) -> torch.Tensor:
        """Which of ``width`` logits may be sampled next (bool); ids past the tokenizer's vocabulary never."""
        bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        mask = torch.zeros(width, dtype=torch.bool)
        n = min(width, self._vocab)
        mask[:n] = torch.from_numpy(bits[:n].astype(np.bool_))
        return mask

    def advance(self, token: int) -> bool:
        """Take the sampled token; False if the grammar refused it (it was not allowed: a bug, or a forced
        end token the mask did not offer)."""
        return self._matcher.consume_token(token)

    @property
    def done(self) -> bool:
        """Nothing more can follow (but the end of the sequence): the reply is complete."""
        return self._matcher.is_stopped()

    @property
    def error(self) -> str:
        return self._matcher.get_error()


def accepts(grammar: Grammar, text: str) -> bool:
    """Whether ``text`` is a whole sentence of ``grammar`` (the synthetic backend's check of a scripted reply)."""
    matcher = llguidance.LLMatcher(_BYTES(), definition(grammar), log_level=0)
    return matcher.consume_tokens(list(text.encode("utf-8"))) and matcher.is_accepting()


def instance(grammar: Grammar, seed: int, max_bytes: int = INSTANCE_MAX_BYTES) -> str:
    """A sentence of ``grammar``, a pure function of ``seed``: each byte one of those the grammar allows, closers
    more often than not (so objects and strings end soon), else mostly a letter or digit, else any printable
    character (so a pattern's punctuation is reached), else whatever it allows.
    Raises InvalidRequest when no end is reached within ``max_bytes``."""
    tokenizer = _BYTES()
    matcher = llguidance.LLMatcher(tokenizer, definition(grammar), log_level=0)
    rng = random.Random(seed)
    out = bytearray()
    eos = tokenizer.eos_token
    while len(out) < max_bytes:
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.nonzero(bits[: tokenizer.vocab_size])[0].tolist()
        if eos in allowed or matcher.is_stopped() or not allowed:
            break
        closers = [b for b in allowed if b in _CLOSERS]
        plain = [b for b in allowed if b in _PLAIN]
        ascii_ = [b for b in allowed if 0x20 <= b < 0x7F]
        draw = rng.random()
        byte = rng.choice(
            closers if closers and draw < 0.6 else plain if plain and draw < 0.85 else ascii_ or [b for b in allowed if b < 256]
        )
        if not matcher.consume_token(byte):
            break
        out.append(byte)
    text = out.decode("utf-8", errors="replace")
    if not matcher.is_accepting():
        raise InvalidRequest(f"the synthetic engine found no reply of at most {max_bytes} bytes that matches the {grammar.kind}")
    return text


_byte_vocabulary: llguidance.LLTokenizer | None = None


def _BYTES() -> llguidance.LLTokenizer:  # noqa: N802 - a shared constant, made on first use
    global _byte_vocabulary
    if _byte_vocabulary is None:
        _byte_vocabulary = byte_tokenizer((b"<eos>",), 256)
    return _byte_vocabulary
