"""The synthetic backend: SGLang's behaviour without a model, for load tests.

Each request waits for one of ``max_batch`` running slots, takes the configured
time to first token, then produces tokens at the configured rate on asyncio, so
thousands of concurrent streams cost little. The reply is deterministic in the
prompt (same prompt, same words). Prompts are counted with ``WordTokenizer``
and looked up in a simulated radix prefix cache, which is what
``cached_tokens`` and the cache hit rate report.

Sampling params are parsed and refused exactly as for the torch backend
(``protocol.parse_sampling``). Of those the torch backend implements, the ones
that end or cut the reply are applied here too (max_new_tokens, stop,
stop_token_ids with ignore_eos and min_new_tokens, no_stop_trim); the ones that
choose tokens (``NO_EFFECT``: temperature, top-k/p, min_p, penalties,
logit_bias, sampling_seed) are accepted and cannot change the synthetic text,
which is fixed by the prompt by definition. ``/get_server_info`` lists both.

Two test-only directives in the prompt script the text (below): ``[[insert:N:BASE64]]``
puts a sentence into the reply, ``[[reply:BASE64]]`` is the whole reply (a tool call
in the pool's format, say). Only this backend reads them; a real model never does.

A grammar (``json_schema``, ``regex``, ``ebnf``) is honoured, never ignored: the reply is
the scripted one if the grammar accepts it whole, else a sentence of the grammar that
``grammar.instance`` draws over bytes in the prompt's seed; either way it ends where the
grammar does, as the torch backend's does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import time
import zlib
from collections.abc import Sequence

from workers.engine import protocol
from workers.engine.detokenize import IncrementalText
from workers.engine.prefix_cache import PrefixCache
from workers.engine.protocol import GenerateInput, Progress
from workers.engine.request import LoadSnapshot, RequestState, Throughput
from workers.engine.settings import EngineSettings
from workers.engine.slots import PrioritySlots
from workers.engine.tokenizer import WordTokenizer

log = logging.getLogger(__name__)

#: Params the torch backend applies that choose tokens: the synthetic text is fixed by the prompt.
NO_EFFECT = frozenset(
    {
        "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
        "logit_bias", "sampling_seed",
    }
)
assert NO_EFFECT <= protocol.IMPLEMENTED

_WORDS = (
    "the of and to in is it that for on with as was be by this are at from or an have not but they which one "
    "you all were her she there would their we him been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way well"
).split()


#: ``[[insert:N:BASE64]]`` in a prompt: the reply carries the decoded sentence after its first N pieces.
#: Tests script a reply that turns bad after clean text with it (the moderation e2e); base64, so the
#: prompt itself does not hold the words.
_INSERT = re.compile(r"\[\[insert:(\d+):([A-Za-z0-9+/=_-]+)\]\]")
#: ``[[reply:BASE64]]`` in a prompt: the reply is exactly the decoded text, then the model's end of turn (the
#: prompt's last such directive wins). Tests script a model's tool call with it, in the pool's format, and the
#: answer after a tool's result (whose text holds the next directive).
_REPLY = re.compile(r"\[\[reply:([A-Za-z0-9+/=_-]+)\]\]")
#: The token id a scripted reply ends with (its end of turn; never text).
SCRIPT_END = 0


def _decoded(encoded: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def scripted_pieces(prompt: str) -> list[str] | None:
    """The pieces of the reply the prompt's last ``[[reply:BASE64]]`` scripts (whitespace kept); None without one.

    A resumed attempt's prompt ends with the reply's text so far (workers/recovery.py): the script goes on
    after it, as a model continues its own text, rather than starting again (which would write its opening
    twice: the audit's ``repeated_text``)."""
    found = _REPLY.findall(prompt)
    text = _decoded(found[-1]) if found else None
    if text is None:
        return None
    done = next((k for k in range(len(text), 0, -1) if prompt.endswith(text[:k])), 0)
    return re.findall(r"\s*\S+|\s+", text[done:])


def constrained_pieces(request: GenerateInput) -> list[str]:
    """The reply to a request with a grammar (json_schema, regex, ebnf): the scripted reply when the grammar
    accepts it whole, else a sentence of the grammar drawn in the prompt's seed (``grammar.instance``). Raises
    InvalidRequest for a grammar that cannot be read, as the torch backend does."""
    from workers.engine import grammar  # llguidance loads only where a grammar is asked for

    constraint = request.sampling.grammar
    assert constraint is not None
    found = _REPLY.findall(request.text)
    scripted = _decoded(found[-1]) if found else None
    grammar.definition(constraint)  # an unreadable grammar is refused, scripted or not
    if scripted is None or not grammar.accepts(constraint, scripted):
        scripted = grammar.instance(constraint, zlib.crc32(request.text.encode("utf-8")))
    return re.findall(r"\s*\S+|\s+", scripted)


def synthetic_pieces(prompt: str, count: int) -> list[str]:
    """``count`` word pieces, a pure function of the prompt: sentences of 8 to 15 words, each ending with a
    period, with a scripted sentence put in where the prompt's last ``[[insert:N:BASE64]]`` says."""
    inserts = _INSERT.findall(prompt)
    pieces = _sentences(prompt, count)
    if not inserts:
        return pieces
    at, encoded = inserts[-1]
    sentence = _decoded(encoded)
    if sentence is None:
        return pieces  # not a script: the prompt's words as they are
    words = [" " + w for w in sentence.split()]
    return (pieces[: int(at)] + words + pieces[int(at) :])[:count]


def _sentences(prompt: str, count: int) -> list[str]:
    state = zlib.crc32(prompt.encode("utf-8")) or 1
    out: list[str] = []
    sentence_left = 0
    while len(out) < count:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        if sentence_left == 0:
            sentence_left = 8 + state % 8
            word = _WORDS[state % len(_WORDS)].capitalize()
        else:
            word = _WORDS[state % len(_WORDS)]
        out.append(" " + word)
        sentence_left -= 1
        if sentence_left == 0 and len(out) < count:
            out.append(".")
    return out[:count]


class SyntheticBackend:
    untrained = False
    #: There are no special tokens in the synthetic text, so both detokenizer flags hold trivially.
    sampling_applied = protocol.IMPLEMENTED - NO_EFFECT

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.model_path = f"parley-synthetic-{settings.synthetic_tokens_per_s:g}tps-{settings.synthetic_ttft_ms:g}ms"
        self.context_length = settings.context_length
        self._tok = WordTokenizer()
        self._cache = PrefixCache(settings.synthetic_cache_tokens)
        self._slots = PrioritySlots(settings.max_batch)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._running: dict[str, int] = {}  # rid -> tokens it holds (prompt + generated)
        self._waiting = 0
        self._throughput = Throughput()
        self._max_running_seen = 0
        self._started = False

    async def start(self) -> None:
        self._started = True
        log.info("synthetic engine ready", extra={"ttft_ms": self.settings.synthetic_ttft_ms})

    async def stop(self) -> None:
        self.abort_all()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def ready(self) -> bool:
        return self._started

    def submit(self, request: GenerateInput) -> RequestState:
        if request.rid in self._tasks:
            raise protocol.InvalidRequest(f"Duplicate request ID: {request.rid}")
        pieces = self._tok.pieces(request.text)
        protocol.check_context(len(pieces), self.context_length)
        protocol.check_logit_bias(request.sampling, self._tok.vocab_size)
        script = constrained_pieces(request) if request.sampling.grammar is not None else scripted_pieces(request.text)
        state = RequestState(request, len(pieces), asyncio.get_running_loop())
        self._tasks[request.rid] = asyncio.create_task(self._run(state, pieces, script))
        return state

    def abort(self, rid: str) -> None:
        task = self._tasks.get(rid)
        if task is not None:
            task.cancel()

    def abort_all(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()

    def load(self) -> LoadSnapshot:
        return LoadSnapshot(
            running=len(self._running),
            waiting=self._waiting,
            max_running=self.settings.max_batch,
            used_tokens=sum(self._running.values()),
            max_total_tokens=self.settings.max_total_tokens,
            cache_hit_rate=self._cache.hit_rate,
            gen_throughput=self._throughput.rate(),
            internal={"max_running_seen": self._max_running_seen, "prefix_cache_tokens": self._cache.size},
        )

    async def _run(self, state: RequestState, prompt: Sequence[str], script: list[str] | None) -> None:
        rid, sampling = state.rid, state.request.sampling
        # SGLang clamps the reply so prompt + reply fits the context.
        max_new = min(sampling.max_new_tokens, self.context_length - len(prompt) - 1)
        ends = script is not None and len(script) <= max_new  # the scripted reply ends before the cap
        reply = script[:max_new] if script is not None else synthetic_pieces(state.request.text, max_new)
        max_new = len(reply) if ends else max_new
        ids = [WordTokenizer.piece_id(p) for p in reply]
        by_id = dict(zip(ids, reply))
        text = IncrementalText(lambda xs: "".join(by_id[i] for i in xs), sampling.stop, sampling.no_stop_trim)
        done = 0
        shown: list[int] = []  # the ids whose text may show: a trimmed stop token is not among them
        admitted = False
        cached = 0
        try:
            self._waiting += 1
            try:
                await self._slots.acquire(state.request.priority)
            finally:
                self._waiting -= 1
            admitted = True
            self._running[rid] = len(prompt)
            self._max_running_seen = max(self._max_running_seen, len(self._running))
            # As in SGLang, the last prompt token is always computed: at most len - 1 are cached.
            cached = self._cache.match(prompt[:-1])
            start = time.monotonic()
            await asyncio.sleep(self.settings.synthetic_ttft_ms / 1000)
            step = 1.0 / self.settings.synthetic_tokens_per_s
            if max_new == 0:
                state.publish(Progress("", (), 0, len(prompt), cached, protocol.finish_length(0)))
                return
            while done < max_new:
                done += 1
                self._running[rid] = len(prompt) + done
                self._throughput.add(1)
                token = ids[done - 1]
                # As the torch backend: a stop token ends the reply (not before min_new_tokens: the fixed
                # text cannot be resampled, so an early one just stays in it) and is cut from the text.
                stop_token = not sampling.ignore_eos and done > sampling.min_new_tokens and token in sampling.stop_token_ids
                final = done == max_new or stop_token
                if not stop_token or sampling.no_stop_trim:
                    shown.append(token)
                added = text.update(shown, final=final)
                finish = None
                if text.matched is not None:
                    finish = protocol.finish_stop_str(text.matched)
                elif stop_token:
                    finish = protocol.finish_stop_token(token)
                elif final:
                    finish = protocol.finish_stop_token(SCRIPT_END) if ends else protocol.finish_length(done)
                state.publish(Progress(added, (token,), done, len(prompt), cached, finish))
                if finish is not None:
                    break
                # An absolute schedule: the rate holds however long publishing took.
                delay = start + self.settings.synthetic_ttft_ms / 1000 + done * step - time.monotonic()
                await asyncio.sleep(max(delay, 0.0))
        except asyncio.CancelledError:
            if admitted:
                state.publish(Progress("", (), done, len(prompt), cached, protocol.finish_abort()))
            else:
                state.publish(Progress("", (), 0, 0, 0, dict(protocol.ABORT_BEFORE_PREFILL)))
        finally:
            if admitted:
                self._slots.release()
                self._running.pop(rid, None)
                # What the cache holds is the text the engine has seen, prompt and reply, as the next
                # prompt will tokenize it (the reply's first word follows the prompt's last characters).
                self._cache.insert(self._tok.pieces(state.request.text + "".join(reply[:done])))
            self._tasks.pop(rid, None)
            log.debug("request finished", extra={"rid": rid, "completion_tokens": done})
