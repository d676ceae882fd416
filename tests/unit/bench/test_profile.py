"""bench/profile.py's reading of py-spy's raw (collapsed) stacks: each sample charged to our innermost
frame and to its leaf's package."""

from bench.profile import shares

RAW = "\n".join([
    "<module> (streams/__main__.py:25);run (streams/processors.py:466);_read (schemas/codec.py:120);read_record (fastavro/_read_py.py:9) 6",
    "<module> (streams/__main__.py:25);run (streams/processors.py:466);select (selectors.py:468) 3",
    "_run_once (asyncio/base_events.py:1922);_run (asyncio/events.py:80) 1",
    "main (/venv/lib/python3.11/site-packages/setuptools/dist.py:1);on_chunk (streams/moderator.py:320) 2",
    "not a line",
])  # fmt: skip


def test_samples_are_charged_to_our_innermost_frame_and_to_the_leafs_package() -> None:
    total, own, leaf = shares(RAW)
    assert total == 12
    assert own == {
        "_read (schemas/codec.py)": 6, "run (streams/processors.py)": 3, "(no Parley frame)": 1,
        "on_chunk (streams/moderator.py)": 2,
    }  # fmt: skip
    assert leaf == {"fastavro": 6, "selectors": 3, "asyncio": 1, "streams": 2}
