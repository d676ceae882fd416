"""Counting prompts (review M5): a whole prompt is counted from its messages' cached counts, exactly for the
engines' tokenizers; a turn tokenises only what it adds; and no tokenising happens on the event loop."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from schemas import events as ev
from schemas.events import PromptMessage
from streams.context import ContextBuilder
from streams.context_tokens import TokenCounter
from streams.settings import ContextSettings
from streams.tree import Conversation, empty
from workers.chat_template import CHATML, DEEPSEEK, LLAMA3
from workers.engine.tokenizer import ByteTokenizer

PIECES = ["hello", "world", "\n", "  ", "café", "日本語", "<b>", "x", "...", "end.", "\t", "emoji🙂", "a\n\nb", "<|im_end|>"]


def _prompts(n: int) -> list[list[PromptMessage]]:
    rng = random.Random(7)
    return [
        [
            PromptMessage(role=rng.choice(["system", "user", "assistant"]), content="".join(rng.choice(PIECES) + rng.choice(["", " ", "\n"]) for _ in range(rng.randint(1, 20))))
            for _ in range(rng.randint(0, 6))
        ]
        for _ in range(n)
    ]


@pytest.mark.parametrize("spec", ["bytes", "smollm2"])
def test_a_prompt_counted_from_its_messages_is_the_whole_prompt_counted(spec: str) -> None:
    counter = TokenCounter.from_spec(spec)  # smollm2: the CPU engine's real BPE tokenizer
    assert counter.additive
    for messages in _prompts(300):
        assert counter.prompt(messages) == counter.count(CHATML.render_prompt(messages))


def test_the_word_tokenizer_is_counted_at_most_one_over_per_message() -> None:
    counter = TokenCounter.from_spec("words")  # the synthetic backend's: a message's last newline joins the next `<`
    for messages in _prompts(300):
        whole = counter.count(CHATML.render_prompt(messages))
        assert whole <= counter.prompt(messages) <= whole + len(messages)


@pytest.mark.parametrize("template", [LLAMA3, DEEPSEEK])
def test_a_template_that_is_not_a_concatenation_is_counted_whole(template: object) -> None:
    counter = TokenCounter.from_spec("bytes", template)  # type: ignore[arg-type]
    assert not counter.additive
    for messages in _prompts(50):
        assert counter.prompt(messages) == counter.count(template.render_prompt(messages))  # type: ignore[attr-defined]


class Watched(ByteTokenizer):
    """Records what it is asked to encode, and on which thread."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def encode(self, text: str) -> list[int]:
        self.calls.append((text, threading.get_ident()))
        return super().encode(text)


class Rows:
    async def load(self, conversation_id: str) -> Conversation:
        return empty(conversation_id)


async def test_a_turn_tokenises_only_what_is_new_and_never_on_the_event_loop() -> None:
    tokenizer = Watched()
    builder = ContextBuilder(ContextSettings(system_prompt="sys", budget_tokens=100_000, tokenizer="bytes"), Rows(), counter=TokenCounter(tokenizer))
    cid, parent = str(uuid.uuid4()), None
    common = {"conversation_id": cid, "user_id": "u"}
    loop_thread = threading.get_ident()
    for k in range(12):
        mid, rid = str(uuid.uuid4()), str(uuid.uuid4())
        await builder.handle(ev.MessagePosted(**common, message_id=mid, parent_id=parent, client_message_id=f"c{k}", content=f"question {k} " * 50))
        tokenizer.calls.clear()
        [req] = await builder.handle(ev.GenerationRequested(**common, request_id=rid, parent_id=mid, client_message_id=f"c{k}"))
        assert isinstance(req, ev.InferenceRequested) and len(req.messages) == 2 * k + 2  # nothing dropped
        encoded = [text for text, _ in tokenizer.calls]
        assert all(thread != loop_thread for _, thread in tokenizer.calls)
        if k >= 1:  # the question and the last reply (its first turn: the system prompt and the frame as well)
            assert encoded == [CHATML.render_message(PromptMessage(role=r, content=c)) for r, c in (("assistant", f"answer {k - 1} " * 40), ("user", f"question {k} " * 50))]
        await builder.handle(ev.GenerationCompleted(**common, request_id=rid, parent_id=mid, finish_reason="stop", content=f"answer {k} " * 40))
        parent = rid
