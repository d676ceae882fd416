"""A synthetic but realistic log of chat turns (pure, seeded): for the replay benchmark and the unit tests.

Each turn is the events the services would write, with the ids they would derive:
MessagePosted + GenerationRequested (gateway), InferenceRequested (context builder),
InferenceRouted (router), GenerationCompleted + UsageRecorded (worker). Some turns are
regenerations, a few are cancelled, a few are shed (the router's GenerationCompleted
``rejected`` / ``overloaded``, nothing routed, no usage); later turns of a conversation hit
the prefix cache.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from parley import ids
from schemas import events as ev
from schemas.catalog import inference_topic
from streams.classify import RANKS

MODELS = {"small": "Qwen/Qwen2.5-0.5B-Instruct", "medium": "Qwen/Qwen2.5-7B-Instruct", "frontier": "Qwen/Qwen2.5-72B-Instruct"}
_WORDS = "the of a to in is it you that he was for on are with as his they be at one have this from".split()


@dataclass(frozen=True)
class Sent:
    topic: str  # catalog name
    event: ev.Event


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def session(conversations: int, turns: int, *, seed: int = 7, start_us: int = 1_700_000_000_000_000, step_us: int = 50_000) -> list[Sent]:
    """``conversations`` × ``turns`` turns, in the order the services would produce them."""
    rng = random.Random(seed)
    out: list[Sent] = []
    clock = start_us

    def tick() -> int:
        nonlocal clock
        clock += step_us
        return clock

    for c in range(conversations):
        cid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        user = f"user-{c % max(1, conversations // 3)}"
        tier = rng.choice(("free", "plus", "enterprise"))
        out.append(Sent("chat.events", ev.ConversationCreated(conversation_id=cid, user_id=user, occurred_at=tick())))
        history: list[ev.PromptMessage] = [ev.PromptMessage(role="system", content="You are a helpful assistant.")]
        parent: str | None = None
        pool = "small"
        for t in range(turns):
            cmid = f"m{t}"
            text = _text(rng, rng.randint(3, 40))
            harder = rng.random()
            if harder < 0.08:  # what the classifier sends up: code, or a proof to reason through
                text = f"Why does this fail?\n```python\ndef f(x):\n    return x/0\n```\n{text}"
            elif harder < 0.12:
                text = f"Prove step by step and explain why: \\int_0^1 x^2 dx = 1/3. Compare the trade-offs. {text}"
            wanted = "medium" if harder < 0.08 else "frontier" if harder < 0.12 else "small"
            before = pool
            pool = wanted if RANKS.index(wanted) > RANKS.index(pool) else pool
            user_mid = ids.user_message_id(cid, cmid)
            common = {"conversation_id": cid, "user_id": user}
            out.append(Sent("chat.events", ev.MessagePosted(**common, message_id=user_mid, parent_id=parent,
                                                            client_message_id=cmid, content=text, occurred_at=tick())))
            asks = [cmid] + ([f"r{t}"] if rng.random() < 0.15 else [])  # sometimes regenerated
            last_reply = ""
            for ask in asks:
                rid = ids.reply_id(cid, ask)
                out.append(Sent("chat.events", ev.GenerationRequested(**common, request_id=rid, parent_id=user_mid,
                                                                      client_message_id=ask, tier=tier, occurred_at=tick())))
                prompt = [*history, ev.PromptMessage(role="user", content=text)]
                tokens = sum(len(m.content.split()) for m in prompt)
                req = ev.InferenceRequested(**common, request_id=rid, parent_id=user_mid, messages=prompt, prompt_tokens=tokens,
                                            budget_tokens=3072, max_tokens=64, tier=tier, occurred_at=tick())
                out.append(Sent("chat.inference", req))
                if tier == "free" and rng.random() < 0.04:  # shed by admission control
                    out.append(Sent("chat.events", ev.GenerationCompleted(
                        **common, request_id=rid, parent_id=user_mid, finish_reason="rejected", pool=pool,
                        model=MODELS[pool], error_code="overloaded", error_message="overloaded", occurred_at=tick())))
                    continue
                down = "medium" if tier == "free" and pool == "small" and rng.random() < 0.05 else None
                out.append(Sent(inference_topic(pool), ev.InferenceRouted(
                    **common, request=req, pool=pool, model=MODELS[pool], partition=rng.randrange(6),
                    route_reason="downgraded" if down else ("classifier" if t == 0 else "escalated" if pool != before and ask == asks[0] else "sticky"),
                    downgraded_from=down,
                    occurred_at=tick())))
                finish = "cancelled" if rng.random() < 0.05 else rng.choice(("stop", "stop", "stop", "length"))
                completion = rng.randint(5, 64)
                usage = ev.Usage(prompt_tokens=tokens, cached_tokens=0 if t == 0 else max(0, tokens - 40), completion_tokens=completion)
                reply = _text(rng, completion)
                replica = f"worker-{pool}-{rng.randrange(2)}"
                out.append(Sent("chat.events", ev.GenerationCompleted(
                    **common, request_id=rid, parent_id=user_mid, finish_reason=finish, content=reply, usage=usage,
                    pool=pool, model=MODELS[pool], replica=replica, occurred_at=tick())))
                ttft = rng.uniform(20, 400) / (2 if usage.cached_tokens else 1)
                out.append(Sent("chat.usage", ev.UsageRecorded(
                    **common, request_id=rid, tier=tier, pool=pool, model=MODELS[pool], replica=replica, usage=usage,
                    queue_ms=rng.uniform(0, 30), ttft_ms=ttft, duration_ms=ttft + completion * rng.uniform(10, 40),
                    finish_reason=finish, occurred_at=tick())))
                last_reply = reply
            history += [ev.PromptMessage(role="user", content=text), ev.PromptMessage(role="assistant", content=last_reply)]
            parent = ids.reply_id(cid, asks[-1])
    return out
