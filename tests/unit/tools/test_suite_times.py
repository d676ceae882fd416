from tools.suite_times import parse, table

LOG = """\
============================= slowest durations ==============================
40.10s setup    tests/e2e/test_quotas.py::test_requests_per_minute_are_shared_by_two_gateways
12.50s call     tests/e2e/test_quotas.py::test_requests_per_minute_are_shared_by_two_gateways
3.00s call     tests/e2e/test_quotas.py::test_get_usage_equals_the_sum_of_the_users_usage_events
20.00s teardown tests/e2e/test_quotas.py::test_get_usage_equals_the_sum_of_the_users_usage_events
0.50s call     tests/unit/parley/test_lru.py::test_evicts[3-x y]
(1607 durations < 0.005s hidden.)
================= 1606 passed, 1 failed in 2620.41s (0:43:40) =================
"""


def test_durations_are_summed_per_module_and_phase() -> None:
    modules, closing = parse(LOG.splitlines())
    quotas = modules["tests/e2e/test_quotas.py"]
    assert (quotas.setup, quotas.call, quotas.teardown) == (40.1, 15.5, 20.0)
    assert len(quotas.tests) == 2
    assert modules["tests/unit/parley/test_lru.py"].tests == {"test_evicts[3-x y]"}
    assert closing == "1606 passed, 1 failed in 2620 s"


def test_the_table_totals_each_directory() -> None:
    modules, _ = parse(LOG.splitlines())
    lines = table(modules).splitlines()
    e2e = next(line for line in lines if line.startswith("tests/e2e "))
    assert e2e.split()[-2:] == ["75.6", "2"]
    assert next(line for line in lines if line.startswith("all")).split()[-2:] == ["76.1", "3"]
