from parley.ops import LagRow, compact, in_namespace, lag_rows, retention, total_lag
from tools.topology import deployment_groups


def test_lag_is_the_end_minus_the_commit_and_the_whole_partition_without_one():
    rows = lag_rows(
        "workers.small",
        {("chat.inference.small", 0): 7, ("chat.inference.small", 1): None},
        {("chat.inference.small", 1): 5, ("chat.inference.small", 0): 10},
    )
    assert [(r.partition, r.committed, r.end, r.lag) for r in rows] == [(0, 7, 10, 3), (1, None, 5, 5)]
    assert total_lag(rows + [LagRow("streams.router", "chat.inference", 0, 2, 2)]) == {
        "workers.small": 8,
        "streams.router": 0,
    }


def test_only_the_catalogs_topics_under_the_deployments_prefix_count():
    assert in_namespace("chat.events", "")
    assert in_namespace("chat.tokens.dlq", "")
    assert not in_namespace("e2e-1234.chat.events", "")
    assert in_namespace("e2e-1234.chat.events", "e2e-1234.")
    assert not in_namespace("chat.events", "e2e-1234.")
    assert not in_namespace("__consumer_offsets", "")


def test_deployment_groups_leave_other_stacks_out():
    ids = ["streams.context", "x-1.streams.context", "workers.small", "random", "streams.router"]
    assert deployment_groups(ids) == ["streams.context", "streams.router", "workers.small"]
    assert deployment_groups(ids, "x-1.") == ["workers.small", "x-1.streams.context"]
    assert deployment_groups(ids + ["x-1.workers.small"], "x-1.", "x-1.") == ["x-1.streams.context", "x-1.workers.small"]


def test_retention_reads_like_an_operator_would_say_it():
    assert retention({"retention.ms": "-1"}) == "forever"
    assert retention({"retention.ms": "86400000"}) == "1 d"
    assert retention({"retention.ms": "3600000"}) == "1 h"
    assert retention({"cleanup.policy": "compact"}) == "compacted"
    assert retention({}) == "7 d"


def test_a_members_partitions_read_as_ranges():
    assert compact([("chat.events", p) for p in (5, 0, 1, 2, 8)] + [("user.memory", 3)]) == "chat.events[0-2,5,8] user.memory[3]"
    assert compact([]) == ""
