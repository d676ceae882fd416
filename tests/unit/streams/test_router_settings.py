"""Router policy from settings: the pools, their models, partitions; settings checked at start-up."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from parley.errors import ConfigError
from parley.partitioning import partition_for
from schemas.catalog import TOPICS
from schemas.events import InferenceRequested, InferenceRouted, PromptMessage
from streams.router import Router, policy_from
from streams.settings import RouterSettings


def _request(cid: str, n: int = 0) -> InferenceRequested:
    return InferenceRequested(
        conversation_id=cid,
        user_id="u",
        request_id=str(uuid.uuid4()),
        parent_id=str(uuid.uuid4()),
        messages=[PromptMessage(role="user", content=f"turn {n}")],
        prompt_tokens=5,
    )


def _route(router: Router, req: InferenceRequested) -> InferenceRouted:
    (out,) = router.route(req, 0.0)
    assert isinstance(out, InferenceRouted)
    return out


def test_the_default_pools_are_all_three_cheapest_first() -> None:
    policy = policy_from(RouterSettings())
    assert list(policy.pools) == ["small", "medium", "frontier"]
    assert policy.pools["frontier"].context_tokens >= policy.pools["small"].context_tokens
    assert policy.partitions == {p: TOPICS[f"chat.inference.{p}"].partitions for p in policy.pools}


def test_without_heartbeats_routes_on_the_conversations_hashed_partition() -> None:
    router = Router(policy_from(RouterSettings(pools="small=m-small", default_pool="small")))
    cid = str(uuid.uuid4())
    req = _request(cid)
    routed = _route(router, req)
    n = TOPICS["chat.inference.small"].partitions
    assert (routed.pool, routed.model, routed.route_reason) == ("small", "m-small", "classifier")
    assert routed.partition == partition_for(cid, n)
    assert routed.request == req and routed.conversation_id == cid and routed.key == cid.encode()


def test_same_conversation_same_partition_and_partitions_in_range_and_spread() -> None:
    router = Router(policy_from(RouterSettings()))
    n = TOPICS["chat.inference.small"].partitions
    seen = set()
    for _ in range(200):
        cid = str(uuid.uuid4())
        parts = {_route(router, _request(cid, i)).partition for i in range(5)}
        assert len(parts) == 1
        (p,) = parts
        assert 0 <= p < n
        seen.add(p)
    assert seen == set(range(n))  # 200 conversations reach every partition


def test_the_default_pool_is_the_floor_of_classified_turns() -> None:
    router = Router(policy_from(RouterSettings(pools="small=a,medium=b", default_pool="medium")))
    assert _route(router, _request(str(uuid.uuid4()))).pool == "medium"


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        (dict(pools="small"), "PARLEY_ROUTER_POOLS"),
        (dict(pools="tiny=m", default_pool="tiny"), "PARLEY_ROUTER_POOLS"),
        (dict(pools="small=m", default_pool="medium"), "PARLEY_ROUTER_DEFAULT_POOL"),
        (dict(context_tokens="small=lots"), "PARLEY_ROUTER_CONTEXT_TOKENS"),
        (dict(capabilities="huge=chat"), "PARLEY_ROUTER_CAPABILITIES"),
        (dict(busy=1.5, queue_limit=1.25), "PARLEY_ROUTER_BUSY"),
        (dict(medium_score=4.0, frontier_score=3.0), "PARLEY_ROUTER_MEDIUM_SCORE"),
        (dict(heartbeat_expiry_s=0.0), "PARLEY_ROUTER_HEARTBEAT_EXPIRY_S"),
        (dict(backlog_every_s=5.0, backlog_stale_s=5.0), "PARLEY_ROUTER_BACKLOG_STALE_S"),
        (dict(backlog_every_s=-1.0), "PARLEY_ROUTER_BACKLOG_EVERY_S"),
    ],
)
def test_bad_settings_name_the_variable(settings: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        policy_from(RouterSettings(**settings))  # type: ignore[arg-type]


def test_several_pools_parse() -> None:
    s = RouterSettings(pools="small=a, medium=b", default_pool="medium")
    assert s.pool_models() == {"small": "a", "medium": "b"}
    assert policy_from(s).pool_of_model("b") == "medium" and policy_from(s).pool_of_model("c") is None


def test_a_second_request_of_the_same_attempt_gets_the_same_decision():
    from streams.router import Router, policy_from
    from streams.settings import RouterSettings
    from schemas.events import InferenceRequested, PromptMessage

    router = Router(policy_from(RouterSettings()))
    req = InferenceRequested(
        conversation_id="2f0d9b9e-1b7e-4a51-9f5e-6a4a0c1e2d3f", user_id="u", request_id="r1", parent_id="p",
        messages=[PromptMessage(role="user", content="hi")], prompt_tokens=5,
    )
    (first,) = router.route(req, now=0.0)
    (again,) = router.route(req, now=1.0)
    assert not first.repeat and again.repeat  # the worker looks a repeat up: the partition may have moved since
    assert replace(again, repeat=False) == first
    (next_attempt,) = router.route(InferenceRequested(**{**req.__dict__, "attempt": 1}), now=2.0)
    assert next_attempt.request.attempt == 1 and next_attempt.event_id != first.event_id
