"""The titler without Kafka or an engine: which conversations get a title, once, and what it looks like."""

from __future__ import annotations

import pytest

from schemas import events as ev
from streams.settings import TitlerSettings
from streams.titles import Titler, clean_title, title_prompt
from streams.engine_writer import WriterUnavailable

CID, U = "5b0c4f7e-0c3e-4b67-9a0e-4f1b2f3c4d5e", "u1"


class FakeWriter:
    def __init__(self, answer: str = "Paris, the capital of France") -> None:
        self.answer = answer
        self.prompts: list[list[ev.PromptMessage]] = []
        self.openings: list[str] = []
        self.fail = False

    def ready(self) -> bool:
        return True

    async def write(
        self, messages: list[ev.PromptMessage], max_tokens: int, stop: tuple[str, ...] = (), opening: str = ""
    ) -> tuple[str, str]:
        self.prompts.append(messages)
        self.openings.append(opening)
        if self.fail:
            raise WriterUnavailable("engine down")
        return self.answer, "small-model"


def opening(title: str = "") -> list[ev.Event]:
    return [
        ev.ConversationCreated(conversation_id=CID, user_id=U, title=title),
        ev.MessagePosted(conversation_id=CID, user_id=U, message_id="m1", client_message_id="c1", content="What is the capital of France?"),
    ]


def reply(content: str = "The capital of France is Paris.", finish: str = "stop") -> ev.GenerationCompleted:
    return ev.GenerationCompleted(conversation_id=CID, user_id=U, request_id="r1", parent_id="m1", finish_reason=finish, content=content)


async def run(titler: Titler, events: list[ev.Event]) -> list[ev.Event]:
    out: list[ev.Event] = []
    for event in events:
        out += await titler.handle(event)
    return out


async def test_the_first_good_reply_gets_one_automatic_title() -> None:
    writer = FakeWriter()
    titler = Titler(TitlerSettings(), writer)
    out = await run(titler, [*opening(), reply(), reply("Another answer.")])
    assert [(type(e), e.title, e.by) for e in out] == [(ev.ConversationRenamed, "Paris, the capital of France", "auto")]
    assert len(writer.prompts) == 1 and "What is the capital of France?" in writer.prompts[0][-1].content
    assert writer.openings == ['Title: "']  # the reply is begun for the model, which writes inside the quotes
    again = await run(Titler(TitlerSettings(), FakeWriter()), [*opening(), reply()])
    assert again[0].event_id == out[0].event_id  # one title event per conversation, whoever writes it


async def test_a_title_is_as_old_as_its_reply_so_a_later_rename_by_the_user_wins_the_row() -> None:
    answered = reply()
    [title] = await run(Titler(TitlerSettings(), FakeWriter()), [*opening(), answered])
    renamed = ev.ConversationRenamed(conversation_id=CID, user_id=U, title="Mine", by="user")
    assert title.occurred_at == answered.occurred_at < renamed.occurred_at


@pytest.mark.parametrize(
    "events",
    [
        [*opening("Mine"), reply()],  # titled by the user at creation
        [*opening(), ev.ConversationRenamed(conversation_id=CID, user_id=U, title="Mine"), reply()],
        [*opening(), ev.ConversationDeleted(conversation_id=CID, user_id=U), reply()],
        [opening()[1], reply()],  # began before this processor's memory: the question is unknown
        [*opening(), reply(finish="failed"), reply(finish="cancelled", content="")],
    ],
)
async def test_no_title_where_it_is_not_ours_to_write(events: list[ev.Event]) -> None:
    writer = FakeWriter()
    assert await run(Titler(TitlerSettings(), writer), events) == []


async def test_an_engine_failure_leaves_it_untitled_until_the_next_reply() -> None:
    writer = FakeWriter()
    writer.fail = True
    titler = Titler(TitlerSettings(), writer)
    assert await run(titler, [*opening(), reply()]) == []
    writer.fail = False
    assert len(await titler.handle(reply("Second."))) == 1


def test_the_answer_is_cleaned_into_a_title() -> None:
    assert clean_title('"Title: The Capital of France."\nSome more text') == "The Capital of France"
    assert clean_title("\n\n  **Event sourcing explained**  ") == "Event sourcing explained"
    long = clean_title("word " * 30)
    assert len(long) <= 60 and not long.endswith(" ")
    assert clean_title("   ") == ""
    assert [m.role for m in title_prompt("q")] == ["system", "user"]
