"""The context builder over long conversations: prefix stability, summaries written once and reused,
dropped on an edit before them, written beside the turn and never failing it (no Kafka; a fake engine
behind the real EngineWriter)."""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from schemas import events as ev
from streams.context import ContextBuilder
from streams.prompt import SUMMARY_HEADER
from streams.settings import ContextSettings
from streams.summary import Summary, from_event
from streams.engine_writer import EngineWriter
from streams.tree import Conversation, branch, empty, fold
from workers.chat_template import CHATML
from workers.engine_api import EngineDelta, EngineUnavailable, GenerateRequest, ModelInfo
from workers.priority import BACKGROUND

SYSTEM = "You are a test assistant."
CFG = ContextSettings(system_prompt=SYSTEM, budget_tokens=4000, summary_tokens=200, drop_fraction=0.25, tokenizer="bytes")


class Engine:
    """Stands in for the small pool's engine: records each prompt, answers a numbered summary (or fails)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.prompts: list[str] = []
        self.fail = fail

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        self.prompts.append(request.text)
        if self.fail:
            raise EngineUnavailable("engine at http://test unreachable")
        text = f"summary number {len(self.prompts)} " + "facts " * 10
        yield EngineDelta(text=text, completion_tokens=12, prompt_tokens=len(request.text), cached_tokens=0, finish_reason="stop")

    async def model_info(self) -> ModelInfo:
        return ModelInfo(model="small-test-model", context_length=8192)


class Rows:
    def __init__(self, states: dict[str, Conversation] | None = None) -> None:
        self.states = states or {}

    async def load(self, conversation_id: str) -> Conversation:
        return self.states.get(conversation_id, empty(conversation_id))


class Stored:
    def __init__(self, summaries: list[Summary]) -> None:
        self.rows = summaries

    async def summaries(self, conversation_id: str) -> list[Summary]:
        return list(self.rows)


def _question(k: int) -> str:
    return f"question {k}: " + "why " * (4 + k % 7)


def _reply(k: int) -> str:
    return f"answer {k}: " + "because " * (8 + (k * 5) % 11)


@dataclass
class Chat:
    """Drives a builder like the log would: posts, requests, feeds back what it writes, completes."""

    builder: ContextBuilder
    cid: str = field(default_factory=lambda: str(uuid.uuid4()))
    log: list[ev.Event] = field(default_factory=list)
    summaries: list[ev.SummaryWritten] = field(default_factory=list)
    #: Wait for the summaries being written after each event (a summary engine quicker than the reply).
    settle: bool = True

    async def send(self, e: ev.Event) -> list[ev.Event]:
        self.log.append(e)
        out = await self.builder.handle(e)
        for o in out:
            if isinstance(o, ev.SummaryWritten):  # the builder reads its own writes back from chat.events
                self.summaries.append(o)
                self.log.append(o)
                assert await self.builder.handle(o) == []
        if self.settle:
            await self.builder.settled()
        return out

    async def turn(self, k: int, parent: str | None, question: str | None = None) -> tuple[ev.InferenceRequested, str]:
        mid, rid = str(uuid.uuid4()), str(uuid.uuid4())
        common = {"conversation_id": self.cid, "user_id": "u"}
        await self.send(ev.MessagePosted(**common, message_id=mid, parent_id=parent, client_message_id=f"c{k}-{mid[:4]}", content=question or _question(k)))
        out = await self.send(ev.GenerationRequested(**common, request_id=rid, parent_id=mid, client_message_id=f"c{k}-{mid[:4]}"))
        [req] = [o for o in out if isinstance(o, ev.InferenceRequested)]
        await self.send(ev.GenerationCompleted(**common, request_id=rid, parent_id=mid, finish_reason="stop", content=_reply(k)))
        return req, rid


def _summary_of(req: ev.InferenceRequested) -> str | None:
    found = [m.content for m in req.messages if m.role == "system" and m.content.startswith(SUMMARY_HEADER)]
    return found[0] if found else None


def _first_turn(req: ev.InferenceRequested) -> str:
    return next(m.content for m in req.messages if m.role != "system")


async def _conversation(cfg: ContextSettings, engine: Engine | None, turns: int = 30) -> tuple[Chat, list[ev.InferenceRequested], list[str]]:
    summariser = EngineWriter(engine, timeout_s=10, retry_s=3600) if engine else None
    chat = Chat(ContextBuilder(cfg, Rows(), summariser=summariser))
    reqs, rids, parent = [], [], None
    for k in range(1, turns + 1):
        req, parent = await chat.turn(k, parent)
        reqs.append(req)
        rids.append(parent)
    return chat, reqs, rids


def _breaks_and_moves(reqs: list[ev.InferenceRequested]) -> tuple[list[int], list[int], list[int]]:
    """Turns whose prompt does not start with the previous prompt plus its reply; turns whose window
    moved; turns that show another summary than the one before."""
    breaks, moves, summaries = [], [], []
    for k in range(1, len(reqs)):
        before, now = CHATML.render_prompt(reqs[k - 1].messages), CHATML.render_prompt(reqs[k].messages)
        if not now.encode().startswith((before + _reply(k) + CHATML.END).encode()):
            breaks.append(k)
        if _first_turn(reqs[k]) != _first_turn(reqs[k - 1]):
            moves.append(k)
        if _summary_of(reqs[k]) != _summary_of(reqs[k - 1]):
            summaries.append(k)
    return breaks, moves, summaries


async def test_prefix_stability_over_thirty_turns_breaks_only_where_the_window_moves_by_a_block() -> None:
    engine = Engine()
    chat, reqs, _ = await _conversation(CFG, engine)
    breaks, moves, summaries = _breaks_and_moves(reqs)
    # Every other turn extends the previous prompt, byte for byte: the summary a move needs was written
    # while the window neared it, so the moving turn shows it and the turns after keep it.
    assert breaks == moves and summaries == moves
    history = sum(len((_question(k) + _reply(k)).encode()) for k in range(1, 31))
    block = CFG.drop_fraction * CFG.budget_tokens
    assert 1 <= len(moves) <= math.ceil((history - CFG.budget_tokens / 2) / block)  # 3 here
    assert all(r.prompt_tokens <= CFG.budget_tokens for r in reqs)
    # Turn at a time, the same conversation breaks its prefix on every turn once full.
    _, one_at_a_time, _ = await _conversation(ContextSettings(**{**CFG.__dict__, "drop_fraction": 0.001}), Engine())
    many, _, _ = _breaks_and_moves(one_at_a_time)
    assert len(many) >= 3 * len(moves)
    print(f"prefix breaks over 30 turns: {len(breaks)} in blocks (window moves {len(moves)}), {len(many)} turn at a time")


async def test_a_summary_is_written_once_per_window_move_and_reused_until_the_next() -> None:
    engine = Engine()
    chat, reqs, _ = await _conversation(CFG, engine)
    _, moves, _ = _breaks_and_moves(reqs)
    # One per move, and perhaps one more, written ahead for the move the last turns near.
    assert len(engine.prompts) == len(chat.summaries) in (len(moves), len(moves) + 1) and len(moves) >= 2
    assert len({s.summary_id for s in chat.summaries}) == len(chat.summaries)
    shown = [_summary_of(r) for r in reqs]
    first_move = moves[0]
    assert shown[:first_move] == [None] * first_move
    for a, b in zip(moves, moves[1:] + [len(reqs)]):
        assert len(set(shown[a:b])) == 1 and shown[a] is not None  # the same summary on every turn between moves
    assert [s for s in shown if s] == [SUMMARY_HEADER + w.content for w in chat.summaries for _ in range(shown.count(SUMMARY_HEADER + w.content))]
    # Each summary extends the previous one: the engine is shown it, and it covers more.
    assert "summary number 1" in engine.prompts[1]
    first, second = chat.summaries[0], chat.summaries[1]
    assert second.covered_message_ids[: len(first.covered_message_ids)] == first.covered_message_ids
    assert (second.model, second.tokens > 0) == ("small-test-model", True)


async def test_an_edit_before_the_summarised_part_drops_the_summary() -> None:
    engine = Engine()
    chat, _, rids = await _conversation(CFG, engine)
    assert chat.summaries
    # Edit the second question: the new branch forks before everything summarised.
    req, _ = await chat.turn(99, rids[0], question="an edited second question")
    assert _summary_of(req) is None
    assert [m.content for m in req.messages] == [SYSTEM, _question(1), _reply(1), "an edited second question"]


async def test_an_edit_inside_the_last_summary_keeps_the_older_one_that_is_still_true_there() -> None:
    engine = Engine()
    chat, reqs, rids = await _conversation(CFG, engine, turns=60)  # long enough that summaries cover turns that had one
    [last] = [w for w in chat.summaries if SUMMARY_HEADER + w.content == _summary_of(reqs[-1])]  # the last shown
    f = max(k for k in range(1, 61) if rids[k - 1] in last.covered_message_ids)  # turn f's reply is the last it covers
    # A sibling of question f (covered by the last summary), as long as it: the window lands where
    # it did for turn f, whose summary covers only messages before the fork.
    edited = _question(f).replace("question", "QUESTION")
    req, _ = await chat.turn(f, rids[f - 2], question=edited)
    assert _summary_of(req) == _summary_of(reqs[f - 1]) is not None
    assert _summary_of(req) != SUMMARY_HEADER + last.content
    assert len({w.summary_id for w in chat.summaries}) == len(chat.summaries)  # reused as it was, not written again


async def test_a_new_branch_long_enough_gets_its_own_summary_of_what_is_on_it() -> None:
    engine = Engine()
    chat, _, rids = await _conversation(CFG, engine)
    old_ids = {s.summary_id for s in chat.summaries}
    parent = rids[0]
    shown = []
    for k in range(200, 230):  # a new branch after turn 1, as long as the first one
        req, parent = await chat.turn(k, parent)
        shown.append(_summary_of(req))
    new = [s for s in chat.summaries if s.summary_id not in old_ids]
    assert new and shown[-1] in {SUMMARY_HEADER + s.content for s in new}
    on_branch = {m.message_id for m in branch(fold(chat.log), parent)}
    for s in new:
        assert set(s.covered_message_ids) <= on_branch


async def test_a_restarted_builder_finds_the_summary_in_the_table_and_does_not_write_it_again() -> None:
    engine = Engine()
    chat, reqs, rids = await _conversation(CFG, engine)
    stored = [from_event(s) for s in chat.summaries]
    state = fold([e for e in chat.log if not isinstance(e, ev.SummaryWritten)])
    fresh_engine = Engine()
    restarted = Chat(
        ContextBuilder(CFG, Rows({chat.cid: state}), stored=Stored(stored), summariser=EngineWriter(fresh_engine, timeout_s=10, retry_s=0)),
        cid=chat.cid,
    )
    req, _ = await restarted.turn(31, rids[-1])
    assert _summary_of(req) == _summary_of(reqs[-1]) is not None
    assert not {s.summary_id for s in restarted.summaries} & {s.summary_id for s in chat.summaries}  # none written again


async def test_a_failing_summary_engine_never_fails_the_turn_and_is_not_asked_on_every_turn(caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine(fail=True)
    caplog.set_level(logging.WARNING, logger="streams.context")
    chat, reqs, _ = await _conversation(CFG, engine)
    assert chat.summaries == [] and all(_summary_of(r) is None for r in reqs)
    assert all(r.prompt_tokens <= CFG.budget_tokens for r in reqs)
    assert len(engine.prompts) == 1  # then it waits PARLEY_CONTEXT_SUMMARY_RETRY_S before asking again
    [record] = [r for r in caplog.records if "no summary" in r.getMessage()]
    assert "question" not in record.getMessage() and "because" not in record.getMessage()  # never the text
    # The engine is back and the retry time is over: the next turn has the summary it needs written, the one after shows it.
    engine.fail = False
    chat.builder._summariser = EngineWriter(engine, timeout_s=10, retry_s=0)  # type: ignore[attr-defined]
    req, rid = await chat.turn(31, reqs[-1].request_id)
    assert _summary_of(req) is None and len(chat.summaries) >= 1
    req, _ = await chat.turn(32, rid)
    assert _summary_of(req) in {SUMMARY_HEADER + s.content for s in chat.summaries}


class Held(Engine):
    """A summary engine that writes nothing until the test lets it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        self.prompts.append(request.text)
        self.priorities = getattr(self, "priorities", []) + [request.priority]
        await self.release.wait()
        yield EngineDelta(text=f"summary number {len(self.prompts)}", completion_tokens=3, prompt_tokens=1, cached_tokens=0, finish_reason="stop")


async def test_the_turn_that_moves_the_window_does_not_wait_for_its_summary_which_later_turns_show() -> None:
    engine = Held()
    chat = Chat(ContextBuilder(CFG, Rows(), summariser=EngineWriter(engine, timeout_s=3600, retry_s=3600)), settle=False)
    reqs, asked, parent, k = [], [], None, 0
    while not reqs or _first_turn(reqs[-1]) == _question(1):  # up to the turn that moves the window
        k += 1
        # On a builder that waited for the summary this would never return: the engine holds until released.
        req, parent = await asyncio.wait_for(chat.turn(k, parent), 30)
        reqs.append(req)
        asked.append(len(engine.prompts))
    moved = reqs[-1]
    assert asked[-2] == 1  # asked ahead, as the window neared the move
    assert _summary_of(moved) is None  # built at once, without it
    for _ in range(3):  # more turns while it is written: built at once, and the summary is not asked for again
        k += 1
        req, parent = await asyncio.wait_for(chat.turn(k, parent), 30)
        assert _summary_of(req) is None
    assert len(engine.prompts) == 1 and engine.priorities == [BACKGROUND]  # nobody waits on it: the lowest priority
    assert chat.summaries == []

    engine.release.set()
    await chat.builder.settled()
    # The conversation's next event appends it, once, and the turn after shows it.
    k += 1
    req, parent = await chat.turn(k, parent)
    written = chat.summaries[0]  # (the next move's may follow: the engine writes at once now)
    assert _summary_of(req) == SUMMARY_HEADER + written.content == SUMMARY_HEADER + "summary number 1"
    assert len({w.summary_id for w in chat.summaries}) == len(chat.summaries)
    # Read back twice (a replay): nothing appended again.
    for _ in range(2):
        assert [e for e in await chat.builder.handle(written) if isinstance(e, ev.SummaryWritten) and e.summary_id == written.summary_id] == []
