"""Gateway shards (parley/shards.py): the setting, which partitions a shard owns, ids minted on them."""

from __future__ import annotations

import uuid

import pytest

from parley.errors import ConfigError
from parley.partitioning import partition_for
from parley.shards import MINT_TRIES, Shard, mint_conversation_id, owner, owns, parse_shard


def test_a_shard_is_index_over_count_and_empty_is_unsharded() -> None:
    assert parse_shard("1/4", 12) == Shard(1, 4)
    assert parse_shard(" 0 / 1 ", 12) == Shard(0, 1)
    assert parse_shard("", 12) is None and parse_shard("  ", 12) is None
    assert str(Shard(3, 4)) == "3/4"


@pytest.mark.parametrize("value", ["4/4", "-1/4", "1", "1/0", "a/b", "1/4/2", "0x1/4"])
def test_a_malformed_shard_names_the_setting(value: str) -> None:
    with pytest.raises(ConfigError, match="PARLEY_GATEWAY_SHARD"):
        parse_shard(value, 12)


def test_more_shards_than_partitions_is_refused() -> None:
    with pytest.raises(ConfigError, match="13 shards of a topic of 12 partitions"):
        parse_shard("0/13", 12)


def test_the_shards_of_a_count_split_the_partitions_between_them() -> None:
    for count in (1, 2, 3, 4, 5, 12):
        shards = [Shard(i, count) for i in range(count)]
        owned = [set(s.partitions(12)) for s in shards]
        assert set().union(*owned) == set(range(12))
        assert sum(len(o) for o in owned) == 12, "each partition has one owner"
        for p in range(12):
            assert shards[owner(p, count)].owns(p)
    assert Shard(1, 4).partitions(12) == [1, 5, 9]
    assert owns(None, 7) and owns(Shard(3, 4), 7) and not owns(Shard(0, 4), 7)


def test_minted_ids_land_on_the_shards_partitions() -> None:
    for shard in (Shard(0, 4), Shard(3, 4), Shard(11, 12)):
        for _ in range(50):
            cid = mint_conversation_id(shard, 12)
            assert shard.owns(partition_for(cid, 12))
            uuid.UUID(cid)  # still a uuid4 string


def test_unsharded_minting_draws_once() -> None:
    draws = []

    def draw() -> uuid.UUID:
        draws.append(1)
        return uuid.uuid4()

    mint_conversation_id(None, 12, draw)
    assert len(draws) == 1


def test_minting_gives_up_after_its_tries_rather_than_spin() -> None:
    fixed = next(uuid.UUID(int=i) for i in range(100) if partition_for(str(uuid.UUID(int=i)), 12) % 2 == 1)
    draws = []

    def draw() -> uuid.UUID:
        draws.append(1)
        return fixed

    assert mint_conversation_id(Shard(0, 2), 12, draw) == str(fixed)
    assert len(draws) == MINT_TRIES
