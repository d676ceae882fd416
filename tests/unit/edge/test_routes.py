"""The edge's choice of gateway (edge/routes.py) and its settings."""

from __future__ import annotations

import pytest

from edge.routes import Route, cursor_partition, order, route
from edge.settings import EdgeSettings
from parley.errors import ConfigError
from parley.partitioning import partition_for

CID = "6f1c5a52-5f0e-4d5b-9a3e-1b2c3d4e5f60"


def test_a_conversation_in_the_path_routes_to_its_partitions_owner() -> None:
    p = partition_for(CID, 12)
    for target in (
        f"/v1/conversations/{CID}",
        f"/v1/conversations/{CID}/messages",
        f"/v1/conversations/{CID}/leaf?x=1",
        f"/v1/conversations/{CID.replace('-', '%2D')}/messages",  # percent-encoded as a client may send it
    ):
        assert route(target, None, 12) == Route(p, "owner"), target


def test_a_resume_with_a_cursor_routes_to_the_cursors_partition() -> None:
    assert route("/v1/messages/m1/stream", "7:1234", 12) == Route(7, "cursor")
    assert route("/v1/messages/m1/stream?last_event_id=3:-1", None, 12) == Route(3, "cursor")
    assert route("/v1/messages/m1/stream", None, 12) == Route(None, "any")
    assert route("/v1/messages/m1/stream", "12:5", 12) == Route(None, "any"), "not a partition of this topic"
    assert route("/v1/messages/m1/stream", "garbage", 12) == Route(None, "any"), "the gateway answers it (400)"


@pytest.mark.parametrize(
    "target",
    ["/v1/conversations", "/v1/conversations?archived=true", "/v1/messages/m/regenerate", "/v1/messages/m/stop",
     "/v1/chat/completions", "/v1/models", "/readyz", "/"],
)  # fmt: skip
def test_requests_that_name_no_conversation_go_anywhere(target: str) -> None:
    assert route(target, "5:5", 12) == Route(None, "any")


def test_cursor_partition() -> None:
    assert cursor_partition("0:0", 12) == 0 and cursor_partition(" 11:99 ", 12) == 11
    for bad in (None, "", "x:1", "1", "1:", "-1:3", "99999999999:1"):
        assert cursor_partition(bad, 12) is None, bad


def test_the_owner_first_then_the_ring_after_it_those_up_before_those_down() -> None:
    up = [True, True, True, True]
    assert order(6, up, 0) == [2, 3, 0, 1]
    assert order(6, [True, True, False, True], 0) == [3, 0, 1, 2], "a down owner's share goes to one neighbour"
    assert order(None, up, 5) == [1, 2, 3, 0], "any: round-robin from the start given"
    assert order(None, [False, False, False, False], 2) == [2, 3, 0, 1], "all down: try them anyway"
    assert order(3, [True], 0) == [0]


def test_the_gateways_setting_is_a_list_of_http_addresses_in_shard_order() -> None:
    settings = EdgeSettings(gateways="http://127.0.0.1:8001, 10.0.0.2:8002,")
    assert settings.addresses == [("127.0.0.1", 8001), ("10.0.0.2", 8002)]
    for bad in ("", "https://h:1", "http://h:1/prefix", "ftp://h"):
        with pytest.raises(ConfigError, match="PARLEY_EDGE_GATEWAYS"):
            EdgeSettings(gateways=bad)
