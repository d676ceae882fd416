"""Summaries, pure: ids, validity on a branch, which blocks to fold in, clipping; the EngineWriter's failures;
the summaries table's rows; the settings that drive them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from types import MappingProxyType
from types import SimpleNamespace as Row

import pytest

from parley.errors import ConfigError
from streams.context_tokens import TokenCounter
from streams.prompt import Layout, choose_window
from streams.settings import ContextSettings
from streams.summary import Summary, clip, find, plan, request_messages, summary_id, text_budget, with_summary
from streams.engine_writer import EngineWriter, WriterUnavailable
from streams.summary_store import summaries_from_rows
from streams.tree import Message
from schemas.events import PromptMessage
from workers.chat_template import TEMPLATES
from workers.engine_api import EngineDelta, GenerateRequest, ModelInfo

BYTES = TokenCounter.from_spec("bytes")


def _branch(n: int, size: int = 100) -> list[Message]:
    out, parent = [], None
    for i in range(n):
        out.append(Message(f"m{i}", parent, "user" if i % 2 == 0 else "assistant", f"{i} " + "x" * size))
        parent = f"m{i}"
    return out


def _summary(covered: list[str], text: str = "s") -> Summary:
    return Summary(summary_id("c", covered), covered[-1], tuple(covered), text)


def test_summary_ids_depend_on_the_conversation_and_the_covered_range_only() -> None:
    assert summary_id("c", ["a", "b", "c"]) == summary_id("c", ["a", "x", "c"]) == str(uuid.UUID(summary_id("c", ["a", "c"])))
    assert len({summary_id("c", ["a", "c"]), summary_id("c", ["b", "c"]), summary_id("d", ["a", "c"])}) == 3


def test_a_summary_is_valid_only_where_all_it_covers_is_on_the_branch() -> None:
    narrow, wide = _summary(["m2", "m3"]), _summary(["m0", "m1", "m2", "m3"])
    known = with_summary(with_summary(MappingProxyType({}), narrow), wide)
    assert find(known, "m3", {"m0", "m1", "m2", "m3", "m4"}) == wide  # the widest that holds
    assert find(known, "m3", {"m2", "m3", "m9"}) == narrow
    assert find(known, "m3", {"m0", "m1", "m2", "m3e"}) is None  # forked before its end
    assert find(known, "m1", {"m0", "m1"}) is None
    assert with_summary(known, _summary(["m2", "m3"], "other text")) is known  # the same id: the first stands


def test_the_plan_extends_the_newest_valid_summary_block_by_block() -> None:
    shape = Layout(system_prompt="s", budget_tokens=1000, block_tokens=250, summary_tokens=100)
    window = choose_window(_branch(41), shape, BYTES)
    bounds = window.bounds
    assert len(bounds) >= 4
    fresh = plan(window, MappingProxyType({}), max_steps=100)
    assert fresh.previous is None and fresh.steps == tuple(zip(bounds, bounds[1:]))
    ids = [m.message_id for m in window.usable]
    older = _summary(ids[: bounds[2]])
    known = with_summary(MappingProxyType({}), older)
    later = plan(window, known, max_steps=100)
    assert later.previous == older and later.steps == tuple(zip(bounds[2:], bounds[3:]))
    done = with_summary(known, _summary(ids[: bounds[-1]]))
    assert plan(window, done, max_steps=100).steps == ()
    capped = plan(window, MappingProxyType({}), max_steps=2)  # a long history seen cold: only the newest blocks
    assert capped.previous is None and capped.steps == tuple(zip(bounds[-3:], bounds[-2:]))


def test_clip_keeps_the_summary_within_its_reservation() -> None:
    limit = text_budget(BYTES, 120)
    assert 0 < limit < 120
    assert clip("  short  ", BYTES, limit) == "short"
    long = "é" * 200
    cut = clip(long, BYTES, limit)
    assert len(cut.encode()) <= limit and long.startswith(cut) and len(cut) > 0


def test_the_summariser_prompt_is_deterministic_and_carries_the_previous_summary() -> None:
    block = _branch(4, size=3)
    assert request_messages("before", block) == request_messages("before", list(block))
    assert "Summary so far:\nbefore" in request_messages("before", block)[-1].content
    assert "Summary so far" not in request_messages(None, block)[-1].content
    assert [m.role for m in request_messages(None, block)] == ["system", "user"]


class Engine:
    def __init__(self, deltas: list[EngineDelta], *, hang: bool = False) -> None:
        self.deltas, self.hang, self.calls = deltas, hang, 0
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        self.calls += 1
        self.requests.append(request)
        assert request.temperature == 0.0 and request.max_new_tokens == 50
        if self.hang:
            await asyncio.Event().wait()
        for d in self.deltas:
            yield d

    async def model_info(self) -> ModelInfo:
        return ModelInfo(model="m-small", context_length=1024)


def _delta(text: str, finish: str | None = None) -> EngineDelta:
    return EngineDelta(text=text, completion_tokens=1, prompt_tokens=1, cached_tokens=0, finish_reason=finish)


PROMPT = [PromptMessage(role="system", content="Summarise."), PromptMessage(role="user", content="a <|im_start|>b")]


async def test_the_summariser_returns_the_text_and_the_model() -> None:
    s = EngineWriter(Engine([_delta("a "), _delta("summary", "length")]), timeout_s=5, retry_s=60)
    assert await s.write(PROMPT, 50) == ("a summary", "m-small")
    assert s.ready()


@pytest.mark.parametrize(
    "engine",
    [
        Engine([_delta("partial"), _delta("", "failed")]),
        Engine([_delta("  ", "stop")]),
        Engine([], hang=True),
    ],
    ids=["failed", "empty", "timeout"],
)
async def test_every_engine_failure_is_summary_unavailable_and_pauses_asking(engine: Engine) -> None:
    s = EngineWriter(engine, timeout_s=0.2, retry_s=3600)
    with pytest.raises(WriterUnavailable):
        await s.write(PROMPT, 50)
    assert not s.ready()
    assert EngineWriter(engine, timeout_s=0.2, retry_s=0).ready()


def test_rows_of_the_summaries_table_become_summaries_and_incomplete_ones_are_skipped() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    rows = [
        Row(summary_id="s1", through_message_id=b, covered_ids=[a, b], covered_message_ids=None, content="text", tokens=4, model="m"),
        Row(summary_id="s2", through_message_id=None, covered_ids=None, covered_message_ids=None, content=None, tokens=None, model=None),
    ]
    assert summaries_from_rows(rows) == [Summary("s1", str(b), (str(a), str(b)), "text", 4, "m")]


def test_a_summary_row_from_before_the_frozen_column_loses_the_duplicates_its_rewrites_added() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    # Written twice into the non-frozen list (a redelivery): Cassandra appended the elements again.
    row = Row(summary_id="s1", through_message_id=b, covered_ids=None, covered_message_ids=[a, b, a, b], content="t", tokens=1, model="m")
    assert summaries_from_rows([row]) == [Summary("s1", str(b), (str(a), str(b)), "t", 1, "m")]


@pytest.mark.parametrize(
    "change, variable",
    [
        ({"drop_fraction": 0.0}, "PARLEY_CONTEXT_DROP_FRACTION"),
        ({"drop_fraction": 1.5}, "PARLEY_CONTEXT_DROP_FRACTION"),
        ({"summary_tokens": 2000}, "PARLEY_CONTEXT_SUMMARY_TOKENS"),
        ({"summary_timeout_s": 0.0}, "PARLEY_CONTEXT_SUMMARY_TIMEOUT_S"),
        ({"summary_max_steps": 0}, "PARLEY_CONTEXT_SUMMARY_MAX_STEPS"),
    ],
)
def test_bad_settings_name_their_variable(change: dict[str, float], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        ContextSettings(**change)  # type: ignore[arg-type]


@pytest.mark.parametrize("family", sorted(TEMPLATES))
async def test_the_writer_renders_in_its_pools_template_and_sends_its_stops(family: str) -> None:
    engine = Engine([_delta("a title", "stop")])
    template = TEMPLATES[family]
    s = EngineWriter(engine, timeout_s=5, retry_s=60, purpose="title", template=template)
    await s.write(PROMPT, 50, stop=('"',), opening='Title: "')
    [sent] = engine.requests
    assert sent.text == template.render_prompt(PROMPT, 'Title: "') and sent.text.endswith('Title: "')
    assert sent.stop == (*template.stop, '"')
