"""Moderation in the pipeline: the processor's checks/s, tokens streamed past a violation, TTFT on vs off.

Three figures, each next to a baseline from the same run:

- ``rate``: the moderation core (streams/moderator.py) fed a stream of reply chunks
  in process, with the local classifier vs. a classifier that scores nothing
  (the windows, bookkeeping and events alone): checks/s and the ratio.
- ``cut``: an isolated stack with the moderation processor; replies whose
  synthetic text carries a bad sentence at a random position
  (``[[insert:N:BASE64]]``). Per reply, the tokens the client received past
  the sentence before the stream ended, next to the tokens to the next
  window boundary (what a windowed check must let through when only the whole
  sentence is caught; the sentence's first half alone may trip a rule, so a
  ratio below 1 happens): above 1 is what propagation (chunk → processor →
  cancel → worker → abort) adds.
- ``ttft``: the same stack's TTFT with the moderation processor running and
  stopped, in alternating blocks of turns (the check runs beside the turn; the
  target is ≤ 5 ms added at p50).

Run: `python -m bench.moderation_stack [--replies N] [--turns N]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.load import pct
from moderation.categories import CATEGORIES
from moderation.classifier import Scores
from moderation.local import LocalClassifier
from moderation.policy import policy_from
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import events as ev
from streams.moderator import Checker, Moderator
from streams.tree import Conversation
from tools import isolated
from tools.client import ParleyClient
from tools.topology import MODERATION

WINDOW, OVERLAP = 200, 50
#: After the processor starts again, before the next block of turns is timed.
SETTLE_S = 8.0
BAD_SENTENCE = "I am going to kill you and burn down your house tonight."
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "50",
    "PARLEY_ENGINE_TOKENS_PER_S": "200",
    "PARLEY_ENGINE_PREFIX_CACHE_TOKENS": "0",
    "PARLEY_CONTEXT_MAX_TOKENS": "24",
    "PARLEY_MODERATION_WINDOW_TOKENS": str(WINDOW),
    "PARLEY_MODERATION_OVERLAP_TOKENS": str(OVERLAP),
}


# ------------------------------------------------------------------ rate: the core in process


class Blind:
    """Scores nothing: the baseline of the core's own cost."""

    model = "blind"

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return [Scores({c: 0.0 for c in CATEGORIES}) for _ in texts]


async def _feed(moderator: Moderator, replies: int, chunk_tokens: int, reply_tokens: int) -> tuple[int, float]:
    words = ("the harbour handled more ships this year than any year before and the town grew with it " * 40).split()
    checks, began = 0, time.perf_counter()
    for r in range(replies):
        rid = f"00000000-0000-4000-8000-{r:012d}"
        seq = 0
        for start in range(0, reply_tokens, chunk_tokens):
            text = " ".join(words[start % 300 : start % 300 + chunk_tokens]) + " "
            last = start + chunk_tokens >= reply_tokens
            chunk = ev.TokenChunk(
                conversation_id=rid, user_id="bench", request_id=rid, seq=seq, text=text, tokens=chunk_tokens,
                finish_reason="stop" if last else None,
            )  # fmt: skip
            checks += sum(isinstance(e, ev.ModerationResult) for e in await moderator.on_chunk(chunk))
            seq += 1
    return checks, time.perf_counter() - began


def rate(replies: int = 400) -> None:
    async def load(cid: str) -> Conversation:
        return Conversation(conversation_id=cid)

    def core(classifier) -> Moderator:  # type: ignore[no-untyped-def]
        return Moderator(Checker(classifier, policy_from("")), load, window_tokens=WINDOW, overlap_tokens=OVERLAP)

    local = LocalClassifier()
    results = {}
    for name, classifier in (("blind", Blind()), ("local", local), ("blind again", Blind())):
        checks, took = asyncio.run(_feed(core(classifier), replies, chunk_tokens=8, reply_tokens=600))
        results[name] = (checks, took)
    base = (results["blind"][1] + results["blind again"][1]) / 2
    checks, took = results["local"]
    print(f"processor core: {replies} replies of 600 tokens in chunks of 8, {checks} checks")
    print(
        f"  local classifier {checks / took:8.0f} checks/s   blind {checks / base:8.0f} checks/s   "
        f"ratio {took / base:5.2f} (the classifier's share of the core's time)   model {local.model}"
    )


# ------------------------------------------------------------------ cut and ttft: a stack


def _script(after: int) -> str:
    return f"[[insert:{after}:{base64.urlsafe_b64encode(BAD_SENTENCE.encode()).decode().rstrip('=')}]]"


def _pieces(text: str) -> list[str]:
    return re.findall(r"[A-Za-z']+|\.", text)


async def cut(stack: isolated.IsolatedStack, replies: int) -> None:
    _, key = stack.create_user("bench", "enterprise")
    client = ParleyClient(stack.url, key)
    past, floor, uncut = [], [], 0
    rng = random.Random(18)
    sentence = len(_pieces(BAD_SENTENCE))
    try:
        for _ in range(replies):
            at = rng.randrange(20, 400)
            cid = await client.create_conversation("bench")
            reply = await client.send(cid, f"Tell me a story. {_script(at)}", max_tokens=900)
            text = reply.text
            if BAD_SENTENCE not in text or reply.final is None or reply.final.data.get("finish_reason") != "content_filter":
                uncut += 1
                continue
            past.append(len(_pieces(text[text.index(BAD_SENTENCE) + len(BAD_SENTENCE) :])))
            end = at + sentence
            floor.append(-end % WINDOW)  # tokens to the next window boundary: a windowed check sees it there
    finally:
        await client.close()
    print(f"cut: {len(past)} replies cut, {uncut} not cut (window {WINDOW}, overlap {OVERLAP}, engine 200 tokens/s)")
    if not past:
        return
    for q in (0.5, 0.99):
        p, f = pct(past, q), pct(floor, q)
        print(f"  tokens past the violation p{int(q * 100):<2d} {p:6.0f}   to the next window boundary {f:6.0f}   ratio {p / max(f, 1):5.2f}")
    print(f"  worst {max(past) if past else 0} tokens (the bound the e2e test holds: {WINDOW + OVERLAP})")


async def _ttfts(client: ParleyClient, turns: int) -> list[float]:
    out = []
    cid = await client.create_conversation("bench")
    for i in range(turns):
        began = time.perf_counter()
        async for event in client.stream_message(cid, f"turn {i}: say something brief"):
            if event.event == "delta":
                out.append(time.perf_counter() - began)
                break
        if i % 10 == 9:
            cid = await client.create_conversation("bench")
    return out


async def ttft(stack: isolated.IsolatedStack, turns: int, blocks: int) -> None:
    _, key = stack.create_user("bench-ttft", "enterprise")
    client = ParleyClient(stack.url, key)
    on: list[float] = []
    off: list[float] = []
    supervisor = stack.supervisor
    try:
        await _ttfts(client, 5)  # warm-up
        for b in range(blocks):
            running = [c for c in supervisor.children if c.service.name == MODERATION.name and c.process.poll() is None]
            if b % 2 == 0:
                (on if running else off).extend(await _ttfts(client, turns))
                for child in running:
                    supervisor.stop(child)
            else:
                off.extend(await _ttfts(client, turns))
                supervisor.wait_ready(supervisor.start(MODERATION))
                await asyncio.sleep(SETTLE_S)  # its start-up (loading the model, joining the group) is not a turn's cost
    finally:
        await client.close()
    ms = 1000.0
    for q in (0.5, 0.99):
        a, b = pct(on, q) * ms, pct(off, q) * ms
        print(f"TTFT p{int(q * 100):<2d}  moderation on {a:7.1f} ms   off {b:7.1f} ms   added {a - b:+6.1f} ms   ratio {a / b:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replies", type=int, default=30, help="replies with a violation to cut")
    parser.add_argument("--turns", type=int, default=40, help="turns per block of the TTFT comparison")
    parser.add_argument("--blocks", type=int, default=6, help="blocks of turns, alternately with the processor running and stopped")
    args = parser.parse_args()
    rate()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "benchmod")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), ENV)
        try:
            asyncio.run(cut(stack, args.replies))
            asyncio.run(ttft(stack, args.turns, args.blocks))
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
