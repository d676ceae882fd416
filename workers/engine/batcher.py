"""The torch backend: a continuous batcher on its own thread.

The event loop thread only tokenizes, validates and hands requests over; the
batcher thread owns the model and runs one loop, SGLang style::

    take new requests and aborts from the inbox
    admit waiting requests (higher ``priority`` first) while the batch and the token budget allow
    if some were admitted: one prefill pass over all of them (left-padded)
    else: one decode pass over every running request together
    publish what the step added to each request (one wake-up of the loop); drop finished rows from the batch cache

Prefill has priority over decode, as in SGLang's default policy. Counters of
decode steps and decoded tokens show the batching from outside
(``/get_server_info`` ``internal_states``).

Each row is sampled with its own params (``torch_model.sample``), a row with a
grammar (``json_schema``, ``regex``, ``ebnf``) only among the tokens its
``grammar.Constraint`` allows, which then takes the token sampled. A request that
sent ``sampling_seed`` draws from a ``torch.Generator`` of its own, seeded with
it, so the same seed, prompt and params give the same reply alone or batched
with any others; requests without one share the engine's generator
(``PARLEY_ENGINE_SEED``), so what they draw depends on what else is running.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from workers.engine import protocol
from workers.engine.detokenize import IncrementalText
from workers.engine.grammar import Constraint
from workers.engine.protocol import GenerateInput, Progress
from workers.engine.request import LoadSnapshot, RequestState, Throughput, publish_threadsafe
from workers.engine.settings import EngineSettings
from workers.engine.torch_model import BatchCache, LoadedModel, left_pad, load_model, model_name, request_generator, sample

log = logging.getLogger(__name__)


@dataclass
class _Seq:
    state: RequestState
    input_ids: list[int]
    max_new: int
    text: IncrementalText
    generator: torch.Generator | None = None  # its own when it sent a sampling_seed, else the engine's
    constraint: Constraint | None = None  # its json_schema / regex / ebnf, advanced on this thread only
    output_ids: list[int] = field(default_factory=list)
    finish: dict[str, Any] | None = None

    @property
    def reserved(self) -> int:
        """Tokens this request may come to hold: what admission budgets for."""
        return len(self.input_ids) + self.max_new


class TorchBackend:
    sampling_applied = protocol.IMPLEMENTED

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.context_length = settings.context_length
        self.model_path = model_name(settings)
        self.untrained = settings.backend == "random"
        self._model: LoadedModel | None = None
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._live: set[str] = set()
        self._live_lock = threading.Lock()
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._cache: BatchCache | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._generator = torch.Generator().manual_seed(settings.seed)
        self._throughput = Throughput()
        # Counters read by load(); written only by the batcher thread.
        self._used_tokens = 0
        self.decode_steps = 0
        self.decode_tokens = 0
        self.max_decode_batch = 0
        self.prefill_batches = 0

    # ------------------------------------------------------------ event loop side

    async def start(self) -> None:
        began = time.monotonic()
        self._model = await asyncio.to_thread(load_model, self.settings)
        self.model_path = self._model.name
        self._thread = threading.Thread(target=self._loop, name="engine-batcher", daemon=True)
        self._thread.start()
        log.info(
            "torch engine ready",
            extra={
                "model": self.model_path,
                "untrained": self.untrained,
                "max_batch": self.settings.max_batch,
                "load_s": round(time.monotonic() - began, 1),
            },
        )

    async def stop(self) -> None:
        self._stopping.set()
        self._inbox.put(("abort_all", None))
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)

    def ready(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, request: GenerateInput) -> RequestState:
        assert self._model is not None, "submit() before start()"
        ids = self._model.tokenizer.encode(request.text)
        protocol.check_context(len(ids), self.context_length)
        protocol.check_logit_bias(request.sampling, self._model.vocab_size)
        grammar = request.sampling.grammar
        if grammar is not None and self._model.grammar_vocab is None:
            raise protocol.InvalidRequest(
                f"sampling param {grammar.kind!r} is not supported by Parley's CPU engine for this model "
                "(llguidance could not read its tokenizer: see the engine's log)"
            )
        constraint = None if grammar is None else Constraint(grammar, self._model.grammar_vocab)
        with self._live_lock:
            if request.rid in self._live:
                raise protocol.InvalidRequest(f"Duplicate request ID: {request.rid}")
            self._live.add(request.rid)
        state = RequestState(request, len(ids), asyncio.get_running_loop())
        sampling = request.sampling
        # SGLang clamps max_new_tokens so prompt + reply fits the context.
        max_new = min(sampling.max_new_tokens, self.context_length - len(ids))
        tok = self._model.tokenizer

        def decode(xs: Sequence[int]) -> str:
            return tok.decode(xs, sampling.skip_special_tokens, sampling.spaces_between_special_tokens)

        text = IncrementalText(decode, sampling.stop, sampling.no_stop_trim)
        self._inbox.put(("add", _Seq(state, ids, max_new, text, request_generator(sampling.seed), constraint)))
        return state

    def abort(self, rid: str) -> None:
        self._inbox.put(("abort", rid))

    def abort_all(self) -> None:
        self._inbox.put(("abort_all", None))

    def load(self) -> LoadSnapshot:
        return LoadSnapshot(
            running=len(self._running),
            waiting=len(self._waiting) + self._inbox.qsize(),
            max_running=self.settings.max_batch,
            used_tokens=self._used_tokens,
            max_total_tokens=self.settings.max_total_tokens,
            cache_hit_rate=0.0,  # no prefix reuse: every prompt is prefilled in full
            gen_throughput=self._throughput.rate(),
            internal={
                "decode_steps": self.decode_steps,
                "decode_tokens": self.decode_tokens,
                "max_decode_batch_size": self.max_decode_batch,
                "prefill_batches": self.prefill_batches,
            },
        )

    # ------------------------------------------------------------ batcher thread

    def _loop(self) -> None:
        while not self._stopping.is_set():
            idle = not self._running and not self._waiting
            self._drain_inbox(block=idle)
            admitted = self._admit()
            try:
                if admitted:
                    self._prefill(admitted)
                elif self._running:
                    self._decode()
            except Exception:
                log.exception("forward pass failed; failing the running batch", extra={"batch": len(self._running)})
                for seq in self._running:
                    seq.finish = protocol.finish_abort("Internal error in the CPU engine's forward pass.", 500, "InternalServerError")
                    self._publish(seq)
                self._running, self._cache = [], None
            self._used_tokens = self._cache.tokens() if self._cache is not None else 0

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.1) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, arg = item
            if kind == "add":
                self._enqueue(arg)
            elif kind == "abort":
                self._abort({arg})
            else:
                self._abort(None)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _enqueue(self, seq: _Seq) -> None:
        """Behind every waiting request of its priority or higher: first come, first served within one."""
        priority = seq.state.request.priority
        at = next((i for i, s in enumerate(self._waiting) if s.state.request.priority < priority), len(self._waiting))
        self._waiting.insert(at, seq)

    def _abort(self, rids: set[str] | None) -> None:
        for seq in [s for s in self._waiting if rids is None or s.state.rid in rids]:
            self._waiting.remove(seq)
            seq.finish = dict(protocol.ABORT_BEFORE_PREFILL)
            self._publish(seq, prompt_tokens=0)
        gone = [i for i, s in enumerate(self._running) if rids is None or s.state.rid in rids]
        if gone:
            for i in gone:
                self._running[i].finish = protocol.finish_abort()
                self._publish(self._running[i])
            self._drop_finished()

    def _admit(self) -> list[_Seq]:
        budget = self.settings.max_total_tokens - sum(s.reserved for s in self._running)
        admitted: list[_Seq] = []
        while self._waiting and len(self._running) + len(admitted) < self.settings.max_batch:
            seq = self._waiting[0]
            if seq.reserved > budget:
                break  # first come, first served: no overtaking of a large request
            self._waiting.popleft()
            if seq.max_new == 0:
                seq.finish = protocol.finish_length(0)
                self._publish(seq)
                continue
            budget -= seq.reserved
            admitted.append(seq)
        return admitted

    @torch.inference_mode()
    def _prefill(self, seqs: list[_Seq]) -> None:
        assert self._model is not None
        ids, mask = left_pad([s.input_ids for s in seqs], self._model.pad_id)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self._model.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        fresh = BatchCache.from_output(out.past_key_values, mask)
        self._cache = fresh if self._cache is None else self._cache.merge(fresh)
        self._running.extend(seqs)
        self.prefill_batches += 1
        self._take_tokens(seqs, out.logits[:, -1, :])

    @torch.inference_mode()
    def _decode(self) -> None:
        assert self._model is not None and self._cache is not None
        seqs = self._running
        ids = torch.tensor([[s.output_ids[-1]] for s in seqs], dtype=torch.long)
        positions = torch.tensor([[len(s.input_ids) + len(s.output_ids) - 1] for s in seqs], dtype=torch.long)
        mask = torch.cat([self._cache.mask, torch.ones((len(seqs), 1), dtype=self._cache.mask.dtype)], dim=1)
        out = self._model.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=self._cache.to_dynamic(), use_cache=True
        )
        self._cache = BatchCache([(layer.keys, layer.values) for layer in out.past_key_values.layers], mask)
        self.decode_steps += 1
        self.decode_tokens += len(seqs)
        self.max_decode_batch = max(self.max_decode_batch, len(seqs))
        self._take_tokens(seqs, out.logits[:, -1, :])

    def _take_tokens(self, seqs: list[_Seq], logits: torch.Tensor) -> None:
        assert self._model is not None
        params = [s.state.request.sampling for s in seqs]
        generators = [s.generator or self._generator for s in seqs]
        eos = self._model.tokenizer.eos_ids
        width = logits.shape[-1]
        allowed = [None if s.constraint is None else s.constraint.allowed(width) for s in seqs]
        tokens = sample(logits, params, [s.output_ids for s in seqs], generators, eos, allowed)
        steps: list[tuple[RequestState, Progress]] = []
        for seq, token, p in zip(seqs, tokens, params):
            seq.output_ids.append(token)
            # As SGLang's Req.check_finished: EOS and stop_token_ids end the reply unless ignore_eos, and
            # the detokenizer leaves the matched token out of the text unless no_stop_trim; a grammar that
            # can take nothing more ends it too (its is_terminated()).
            refused = seq.constraint is not None and not seq.constraint.advance(token)
            complete = seq.constraint is not None and seq.constraint.done
            stop_token = not p.ignore_eos and (token in eos or token in p.stop_token_ids)
            at_limit = len(seq.output_ids) >= seq.max_new
            shown = seq.output_ids[:-1] if stop_token and not p.no_stop_trim else seq.output_ids
            added = seq.text.update(shown, final=stop_token or at_limit or complete or refused)
            if refused:
                assert seq.constraint is not None
                # Not the matcher's error text: it can quote the reply.
                log.error("the grammar refused a token its mask allowed", extra={"rid": seq.state.rid})
                seq.finish = protocol.finish_abort("The grammar refused the sampled token.", 500, "InternalServerError")
            elif seq.text.matched is not None:
                seq.finish = protocol.finish_stop_str(seq.text.matched)
            elif stop_token or complete:
                seq.finish = protocol.finish_stop_token(token)
            elif at_limit:
                seq.finish = protocol.finish_length(len(seq.output_ids))
            steps.append((seq.state, self._progress(seq, added, (token,))))
        publish_threadsafe(steps)  # one wake-up of the loop per step
        self._throughput.add(len(seqs))
        self._drop_finished()

    def _drop_finished(self) -> None:
        keep = [i for i, s in enumerate(self._running) if s.finish is None]
        if len(keep) == len(self._running):
            return
        self._running = [self._running[i] for i in keep]
        self._cache = self._cache.select(keep) if keep and self._cache is not None else None

    def _publish(self, seq: _Seq, prompt_tokens: int | None = None) -> None:
        """A request's ending outside a step (abort, failure, nothing to generate): nothing new to add."""
        seq.state.publish_threadsafe(self._progress(seq, "", (), prompt_tokens))

    def _progress(self, seq: _Seq, text: str, ids: tuple[int, ...], prompt_tokens: int | None = None) -> Progress:
        if seq.finish is not None:
            with self._live_lock:
                self._live.discard(seq.state.rid)
            log.debug("request finished", extra={"rid": seq.state.rid, "completion_tokens": len(seq.output_ids)})
        return Progress(
            text=text,
            output_ids=ids,
            completion_tokens=len(seq.output_ids),
            prompt_tokens=len(seq.input_ids) if prompt_tokens is None else prompt_tokens,
            cached_tokens=0,
            finish_reason=seq.finish,
        )
