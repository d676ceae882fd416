"""A sharded gateway (PARLEY_GATEWAY_SHARD): the settings, the 421 that sends a stream to its owner,
and the token reader giving borrowed partitions back sooner than its own."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from starlette.requests import Request

from gateway import ownership, tokens
from gateway.errors import openai_response
from gateway.settings import GatewaySettings
from gateway.tokens import TokenStreams
from parley.errors import ConfigError
from parley.partitioning import partition_for
from parley.settings import KafkaSettings, from_env
from parley.shards import Shard


def test_the_shard_setting_is_read_and_checked_at_start_up() -> None:
    settings = from_env(GatewaySettings, {"PARLEY_GATEWAY_SHARD": "2/3", "PARLEY_GATEWAY_BORROWED_IDLE_S": "0.5"})
    assert settings.token_shard == Shard(2, 3) and settings.borrowed_idle_s == 0.5
    assert from_env(GatewaySettings, {}).token_shard is None
    with pytest.raises(ConfigError, match="PARLEY_GATEWAY_SHARD"):
        from_env(GatewaySettings, {"PARLEY_GATEWAY_SHARD": "3/3"})
    with pytest.raises(ConfigError, match="PARLEY_GATEWAY_BORROWED_IDLE_S"):
        from_env(GatewaySettings, {"PARLEY_GATEWAY_BORROWED_IDLE_S": "-1"})


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw, "query_string": b""})


def _svc(shard: Shard | None) -> SimpleNamespace:
    return SimpleNamespace(tokens=SimpleNamespace(shard=shard, partition_of=lambda cid: partition_for(cid, 12)))


def _owned_by(shard: Shard, mine: bool) -> str:
    return next(f"c{i}" for i in range(1000) if shard.owns(partition_for(f"c{i}", 12)) == mine)


def test_a_stream_of_another_shards_partition_is_sent_back_only_when_the_edge_can_reroute() -> None:
    shard = Shard(0, 2)
    foreign, own = _owned_by(shard, False), _owned_by(shard, True)
    reroute = _request({"X-Parley-Route": "reroute"})
    with pytest.raises(ownership.Misdirected) as refused:
        ownership.check(reroute, _svc(shard), foreign)  # type: ignore[arg-type]
    assert refused.value.partition == partition_for(foreign, 12)
    ownership.check(reroute, _svc(shard), own)  # type: ignore[arg-type]
    ownership.check(_request({}), _svc(shard), foreign)  # type: ignore[arg-type]  # a client straight here: served
    ownership.check(reroute, _svc(None), foreign)  # type: ignore[arg-type]  # unsharded: owns everything


def test_the_421_names_the_partition_in_both_error_shapes() -> None:
    response = ownership.Misdirected(7).response()
    assert response.status_code == 421 and response.headers["x-parley-partition"] == "7"
    assert json.loads(bytes(response.body))["error"]["code"] == "misdirected"
    openai = openai_response(ownership.Misdirected(7))  # POST /v1/chat/completions
    assert openai.status_code == 421 and openai.headers["x-parley-partition"] == "7"


class FakeConsumer:
    def __init__(self) -> None:
        self.assigned: set[int] = set()

    def incremental_assign(self, tps: list) -> None:
        self.assigned |= {tp.partition for tp in tps}

    def incremental_unassign(self, tps: list) -> None:
        self.assigned -= {tp.partition for tp in tps}

    def seek(self, tp: object) -> None:
        pass


def test_a_borrowed_partition_is_given_back_soon_and_an_owned_one_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "IDLE_CHECK_S", 0.0)
    streams = TokenStreams(KafkaSettings(bootstrap="127.0.0.1:1"), Shard(0, 2), borrowed_idle_s=0.05)
    real = (streams._consumer, streams._meta)
    fake = FakeConsumer()
    streams._consumer = fake  # type: ignore[assignment]
    try:
        own, borrowed = streams.open("r1", 4, 0), streams.open("r2", 5, 0)
        streams._apply_commands()
        assert fake.assigned == {4, 5}
        streams.close_stream(own)
        streams.close_stream(borrowed)
        deadline = time.monotonic() + 2
        while 5 in fake.assigned and time.monotonic() < deadline:
            streams._unassign_idle()
            time.sleep(0.01)
        assert fake.assigned == {4}, "the borrowed partition went back; the owned one waits out its 30 s"
    finally:
        for consumer in real:
            consumer.close()
