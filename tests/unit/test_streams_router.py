"""Router policy: one pool for now, a partition sticky per conversation; settings checked at start-up."""

from __future__ import annotations

import uuid

import pytest

from parley.errors import ConfigError
from parley.partitioning import partition_for
from schemas.catalog import TOPICS
from schemas.events import InferenceRequested, PromptMessage
from streams.router import policy_from, route
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


def test_routes_to_the_default_pool_on_the_conversations_partition() -> None:
    policy = policy_from(RouterSettings(pools="small=m-small", default_pool="small"))
    cid = str(uuid.uuid4())
    req = _request(cid)
    routed = route(req, policy)
    n = TOPICS["chat.inference.small"].partitions
    assert (routed.pool, routed.model, routed.route_reason) == ("small", "m-small", "sticky")
    assert routed.partition == partition_for(cid, n)
    assert routed.request == req and routed.conversation_id == cid and routed.key == cid.encode()


def test_same_conversation_same_partition_and_partitions_in_range_and_spread() -> None:
    policy = policy_from(RouterSettings())
    n = TOPICS["chat.inference.small"].partitions
    seen = set()
    for _ in range(200):
        cid = str(uuid.uuid4())
        parts = {route(_request(cid, i), policy).partition for i in range(5)}
        assert len(parts) == 1
        (p,) = parts
        assert 0 <= p < n
        seen.add(p)
    assert seen == set(range(n))  # 200 conversations reach every partition


@pytest.mark.parametrize(
    ("pools", "default", "names"),
    [
        ("small", "small", "PARLEY_ROUTER_POOLS"),
        ("tiny=m", "tiny", "PARLEY_ROUTER_POOLS"),
        ("small=m", "medium", "PARLEY_ROUTER_DEFAULT_POOL"),
    ],
)
def test_bad_pool_settings_name_the_variable(pools: str, default: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        policy_from(RouterSettings(pools=pools, default_pool=default))


def test_several_pools_parse() -> None:
    s = RouterSettings(pools="small=a, medium=b", default_pool="medium")
    assert s.pool_models() == {"small": "a", "medium": "b"}
