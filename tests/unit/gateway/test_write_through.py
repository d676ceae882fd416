"""The gateway's write-through cut short by an outage: what it leaves must not look like a written event
to the materializer, which skips an event whose rows it finds in the conversation's own partition."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.store import Store
from parley.errors import StoreUnavailable
from schemas.events import ConversationCreated, MessagePosted
from streams import tree

CID = "0b7c2f04-9f47-4a55-8b5e-6d1c1b0a3f10"
MID = "5a1d7b8e-3c2f-4e6a-9b1d-2f3e4a5b6c7d"


class Cql:
    """Records each request's tables; the ``fail_at``-th request (1-based) fails as an outage would."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at, self.requests, self.written = fail_at, 0, []

    def _take(self, tables: list[str]) -> None:
        self.requests += 1
        if self.requests == self.fail_at:
            raise StoreUnavailable("Cassandra away")
        self.written.append(tables)

    async def run(self, cql: str, values: tuple[Any, ...] = ()) -> list[Any]:
        self._take([_table(cql)])
        return []

    async def run_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        self._take([_table(c) for c, _ in statements])


def _table(cql: str) -> str:
    return cql.split()[1].removeprefix("{ks}.")


async def test_a_creation_cut_short_leaves_the_conversation_row_unwritten() -> None:
    created = ConversationCreated(conversation_id=CID, user_id="u", title="", model=None)
    cql = Cql(fail_at=2)
    with pytest.raises(StoreUnavailable):
        await Store(cql).write_through(created)  # type: ignore[arg-type]
    # The owner's list first; the conversations row (which says "created" to the materializer) never came.
    assert cql.written == [["conversations_by_user"]]
    whole = Cql()
    await Store(whole).write_through(created)  # type: ignore[arg-type]
    assert whole.written == [["conversations_by_user"], ["conversations"]]


async def test_a_message_and_its_conversation_row_are_one_request() -> None:
    state = tree.apply(tree.empty(CID), ConversationCreated(conversation_id=CID, user_id="u", title="", model=None))
    posted = MessagePosted(conversation_id=CID, user_id="u", message_id=MID, parent_id=None, role="user", content="hi", client_message_id="c1")
    cql = Cql()
    await Store(cql).write_through(posted, state)  # type: ignore[arg-type]
    assert len(cql.written) == 1 and sorted(cql.written[0]) == ["conversations", "messages"]
