"""The router's decision: pool choice, user-selected model, one-way escalation, the model recorded,
placement on the fleet view, admission by tier. Table-driven where it can be; no Kafka."""

from __future__ import annotations

import time
import uuid

import pytest

from parley.partitioning import partition_for
from schemas.catalog import TOPICS
from schemas.events import GenerationCompleted, InferenceRequested, InferenceRouted, PromptMessage, TokenChunk, WorkerHeartbeat
from streams.router import Router, policy_from
from streams.settings import RouterSettings

SETTINGS = RouterSettings(
    pools="small=m-small,medium=m-medium,frontier=m-frontier",
    context_tokens="small=1000,medium=4000,frontier=16000",
    capabilities="small=chat,medium=chat+code+math,frontier=chat+code+math",
)
EASY = "What's the capital of France?"
CODE = "Why does this fail?\n```python\ndef f(x):\n    return x/0\n```"
HARD = "Prove the theorem step by step and explain why each lemma holds: \\int_0^1 x^2 dx = 1/3"
SNIPPET = "def f(): return 1"  # code, but scores low: small by score, not trusted with code


def request(cid: str, text: str, *, model: str | None = None, tier: str = "plus", prompt_tokens: int = 50,
            max_tokens: int = 100) -> InferenceRequested:
    return InferenceRequested(
        conversation_id=cid,
        user_id="u",
        request_id=str(uuid.uuid4()),
        parent_id=str(uuid.uuid4()),
        messages=[PromptMessage(role="system", content="sys"), PromptMessage(role="user", content=text)],
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        model=model,
        tier=tier,
    )


def routed(router: Router, req: InferenceRequested, now: float = 0.0) -> InferenceRouted:
    (out,) = router.route(req, now)
    assert isinstance(out, InferenceRouted)
    return out


@pytest.mark.parametrize(
    "text, prompt_tokens, model, pool, reason",
    [
        (EASY, 50, None, "small", "classifier"),
        (CODE, 50, None, "medium", "classifier"),
        (HARD, 50, None, "frontier", "classifier"),
        (SNIPPET, 50, None, "medium", "classifier"),  # needs code: the cheapest pool trusted with it
        (EASY, 2000, None, "medium", "classifier"),  # does not fit small's 1000 tokens
        (EASY, 9000, None, "frontier", "classifier"),
        (EASY, 50, "m-frontier", "frontier", "user_selected"),  # by model name
        (HARD, 50, "small", "small", "user_selected"),  # by pool name; the user's choice beats the classifier
        (EASY, 50, "auto", "small", "classifier"),
    ],
)
def test_pool_choice(text: str, prompt_tokens: int, model: str | None, pool: str, reason: str) -> None:
    out = routed(Router(policy_from(SETTINGS)), request(str(uuid.uuid4()), text, model=model, prompt_tokens=prompt_tokens))
    assert (out.pool, out.route_reason) == (pool, reason)
    assert out.model == f"m-{pool}"  # the model that will serve it is recorded, not the tier asked for
    assert out.downgraded_from is None


def test_escalation_is_one_way_and_sticky_per_conversation() -> None:
    router = Router(policy_from(SETTINGS))
    cid = str(uuid.uuid4())
    steps = [(EASY, "small", "classifier"), (EASY, "small", "hashed"), (CODE, "medium", "escalated"),
             (EASY, "medium", "hashed"), (HARD, "frontier", "escalated"), (EASY, "frontier", "hashed")]
    for text, pool, reason in steps:
        out = routed(router, request(cid, text))
        assert (out.pool, out.model, out.route_reason) == (pool, f"m-{pool}", reason), text
    other = routed(router, request(str(uuid.uuid4()), EASY))
    assert other.pool == "small"  # stickiness is per conversation


def test_a_user_selected_model_is_respected_and_becomes_the_conversations_pool() -> None:
    router = Router(policy_from(SETTINGS))
    cid = str(uuid.uuid4())
    assert routed(router, request(cid, HARD)).pool == "frontier"
    assert routed(router, request(cid, EASY, model="m-small")).pool == "small"
    assert routed(router, request(cid, EASY)).pool == "small"  # escalation starts again from the user's choice


@pytest.mark.parametrize(
    "model, prompt_tokens, code, names",
    [
        ("gpt-17", 50, "unknown_model", "m-frontier, m-medium, m-small"),  # what the user may choose instead
        ("m-small", 2000, "context_too_long", "PARLEY_ROUTER_CONTEXT_TOKENS"),  # the setting to change
        (None, 20000, "context_too_long", "PARLEY_ROUTER_CONTEXT_TOKENS"),
    ],
)
def test_a_turn_that_cannot_be_routed_fails_clearly(model: str | None, prompt_tokens: int, code: str, names: str) -> None:
    req = request(str(uuid.uuid4()), EASY, model=model, prompt_tokens=prompt_tokens)
    completed, last = Router(policy_from(SETTINGS)).route(req, 0.0)
    assert isinstance(completed, GenerationCompleted) and isinstance(last, TokenChunk)
    assert (completed.finish_reason, completed.error_code) == ("failed", code)
    assert (last.finish_reason, last.error_code, last.seq) == ("failed", code, 0)
    assert completed.request_id == last.request_id == req.request_id and completed.parent_id == req.parent_id
    assert names in (completed.error_message or "") and completed.error_message == last.error_message


def test_only_configured_pools_are_used() -> None:
    router = Router(policy_from(RouterSettings(pools="small=s", capabilities="small=chat")))
    out = routed(router, request(str(uuid.uuid4()), HARD))
    assert (out.pool, out.model) == ("small", "s")


# ------------------------------------------------------------------ with a fleet

WALL = int(time.time() * 1e6)


def heartbeat(worker: str, partitions: list[int], *, pool: str = "small", load: int = 0, max_running: int = 4,
              draining: bool = False) -> WorkerHeartbeat:
    return WorkerHeartbeat(worker_id=worker, pool=pool, partitions=partitions, running=min(load, max_running),
                           queued=max(0, load - max_running), max_running=max_running, draining=draining)


def three_workers(router: Router, now: float, loads: tuple[int, int, int] = (0, 0, 0), **kw: int) -> None:
    for i, load in enumerate(loads):
        router.heartbeat(heartbeat(f"w{i}", [2 * i, 2 * i + 1], load=load, **kw), now)


def test_without_heartbeats_a_conversation_hashes_to_one_partition() -> None:
    router = Router(policy_from(SETTINGS))
    cid = str(uuid.uuid4())
    partitions = {routed(router, request(cid, EASY)).partition for _ in range(3)}
    assert partitions == {partition_for(cid, TOPICS["chat.inference.small"].partitions)}


def test_turns_stay_on_their_worker_and_move_when_it_is_gone_or_hot() -> None:
    router = Router(policy_from(SETTINGS))
    three_workers(router, now=0)
    cid = str(uuid.uuid4())
    first = routed(router, request(cid, EASY), now=1)
    owner = first.partition // 2
    for t in range(2, 5):
        again = routed(router, request(cid, EASY), now=t)
        assert (again.partition, again.route_reason) == (first.partition, "sticky")

    # its worker stops beating (killed): once expired, the conversation moves to a live one and stays there
    for i in range(3):
        if i != owner:
            router.heartbeat(heartbeat(f"w{i}", [2 * i, 2 * i + 1]), 8)
    moved = routed(router, request(cid, EASY), now=9)
    assert moved.route_reason == "moved_gone" and moved.partition // 2 != owner
    assert routed(router, request(cid, EASY), now=9.5).partition == moved.partition

    # its new home gets hot: the next turn moves to the coolest worker
    home = moved.partition // 2
    loads = [0, 0, 0]
    loads[home] = 20
    three_workers(router, now=10, loads=tuple(loads))  # type: ignore[arg-type]
    hot = routed(router, request(cid, EASY), now=10.5)
    assert hot.route_reason == "moved_hot" and hot.partition // 2 != home


def test_a_draining_worker_gets_no_new_conversations() -> None:
    router = Router(policy_from(SETTINGS))
    router.heartbeat(heartbeat("w0", [0, 1, 2], draining=True, max_running=100), 0)
    router.heartbeat(heartbeat("w1", [3, 4, 5], max_running=100), 0)
    for _ in range(20):
        assert routed(router, request(str(uuid.uuid4()), EASY), now=1).partition in (3, 4, 5)


def test_admission_downgrades_then_sheds_free_turns_and_keeps_the_paid_share() -> None:
    settings = RouterSettings(
        pools=SETTINGS.pools, context_tokens=SETTINGS.context_tokens, capabilities=SETTINGS.capabilities,
        busy=0.8, queue_limit=1.25, paid_limit=3.0, retry_after_s=5,
    )
    router = Router(policy_from(settings))
    router.heartbeat(heartbeat("s", [0, 1, 2, 3, 4, 5], pool="small", max_running=2), 0)
    router.heartbeat(heartbeat("m", [0, 1, 2, 3, 4, 5], pool="medium", max_running=2), 0)
    outcomes = []
    for _ in range(6):  # no new heartbeat: the router's own placements raise the pressure
        out = router.route(request(str(uuid.uuid4()), CODE, tier="free"), now=1)
        outcomes.append(out[0].pool + ("<" + str(out[0].downgraded_from) if isinstance(out[0], InferenceRouted)
                                       and out[0].downgraded_from else "") if len(out) == 1 else "shed")
    # medium 0 → 0.5 → 1.0 (busy): downgraded to small 0 → 0.5 → 1.0 (busy too): queued on medium to 1.5, then shed
    assert outcomes == ["medium", "medium", "small<medium", "small<medium", "medium", "shed"]

    completed, last = router.route(request(str(uuid.uuid4()), CODE, tier="free"), now=1)
    assert isinstance(completed, GenerationCompleted) and isinstance(last, TokenChunk)
    assert (completed.finish_reason, completed.error_code, completed.pool) == ("rejected", "overloaded", "medium")
    assert (last.finish_reason, last.error_code) == ("rejected", "overloaded") and last.retry_after >= 5

    paid = routed(router, request(str(uuid.uuid4()), CODE, tier="enterprise"), now=1)
    assert (paid.pool, paid.downgraded_from) == ("medium", None)  # within the reserved share

    # a fresh heartbeat says the pool drained: free turns are admitted again
    router.heartbeat(heartbeat("m", [0, 1, 2, 3, 4, 5], pool="medium", max_running=2), 2)
    assert routed(router, request(str(uuid.uuid4()), CODE, tier="free"), now=2).pool == "medium"


def test_a_downgraded_turn_records_why_and_does_not_lower_the_conversations_pool() -> None:
    router = Router(policy_from(SETTINGS))
    router.heartbeat(heartbeat("s", [0], pool="small"), 0)
    router.heartbeat(heartbeat("m", [0], pool="medium", load=4), 0)
    cid = str(uuid.uuid4())
    down = routed(router, request(cid, CODE, tier="free"), now=1)
    assert (down.pool, down.model, down.downgraded_from, down.route_reason) == ("small", "m-small", "medium", "downgraded")
    router.heartbeat(heartbeat("m", [0], pool="medium", load=0), 2)
    back = routed(router, request(cid, EASY, tier="free"), now=2)
    assert (back.pool, back.downgraded_from) == ("medium", None)  # still the pool the conversation needs


def test_a_user_selected_model_is_never_downgraded() -> None:
    router = Router(policy_from(SETTINGS))
    router.heartbeat(heartbeat("s", [0], pool="small"), 0)
    router.heartbeat(heartbeat("m", [0], pool="medium", load=4), 0)
    out = routed(router, request(str(uuid.uuid4()), EASY, tier="free", model="m-medium"), now=1)
    assert (out.pool, out.downgraded_from) == ("medium", None)  # queued on its pool instead


def test_comparing_documents_is_hard_work_and_a_missing_document_does_not_count() -> None:
    from dataclasses import replace

    from schemas.events import DocumentCoverage, Retrieval

    def with_documents(statuses: list[str]) -> InferenceRequested:
        docs = [DocumentCoverage(document_id=str(uuid.uuid4()), status=s, pages_ready=9) for s in statuses]
        return replace(request(str(uuid.uuid4()), "Compare the reports."), retrieval=Retrieval(path="hybrid", documents=docs))

    router = Router(policy_from(SETTINGS))
    assert routed(router, request(str(uuid.uuid4()), "Compare the reports.")).pool == "small"
    assert routed(router, with_documents(["ready", "ready"])).pool == "medium"
    assert routed(router, with_documents(["ready"] * 4)).pool == "frontier"
    assert routed(router, with_documents(["missing", "missing"])).pool == "small"


def test_an_uncapped_turn_gets_the_rest_of_its_pools_context_and_a_repeat_the_same() -> None:
    """max_tokens 0 (an OpenAI-API turn without a cap): the reply may use what the routed pool's context leaves."""
    router = Router(policy_from(SETTINGS))
    req = request(str(uuid.uuid4()), EASY, prompt_tokens=400, max_tokens=0)
    out = routed(router, req)
    assert out.pool == "small" and out.request.max_tokens == 1000 - 400
    assert routed(router, req).request.max_tokens == 600  # the remembered decision, resolved the same way
    chosen = routed(router, request(str(uuid.uuid4()), EASY, model="m-medium", prompt_tokens=400, max_tokens=0))
    assert chosen.request.max_tokens == 4000 - 400
    (refused, *_) = router.route(request(str(uuid.uuid4()), EASY, prompt_tokens=16000, max_tokens=0), 0.0)
    assert not isinstance(refused, InferenceRouted)  # no room for one token of reply anywhere: context_too_long
