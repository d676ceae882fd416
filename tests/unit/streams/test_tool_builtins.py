"""The built-ins over the calling user's data (streams/tool_builtins.py), with the documents, the search and
the memory in memory: only the caller's data is read, a memory change is returned as one snapshot (never
written here), and a hostile argument ends the call as an error instead of raising."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from documents.hits import Hit, Scope
from documents.retrieval import Retrieved
from parley.errors import StoreUnavailable
from schemas import sealing
from schemas.events import MemoryUpdated
from streams.document_search import DocumentSearch, Status
from streams.memory import MAX_FACTS
from streams.tool_builtins import DocumentsTool, MemoryTool
from workers.tool_runners import NotSent, ToolResult

A, B = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"


class Library:
    def __init__(self, owned: dict[str, list[str]]) -> None:
        self.owned = owned

    async def document_ids(self, user_id: str) -> list[str]:
        return self.owned.get(user_id, [])


class Statuses:
    async def statuses(self, user_id: str, document_ids: Sequence[str]) -> dict[str, Status]:
        return {d: Status(d, f"{d[-1]}.pdf", "ready", 4, 4) for d in document_ids}


class Search:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits, self.scopes = hits, []

    async def retrieve(self, query: str, scopes: Sequence[Scope], limit: int) -> Retrieved:
        self.scopes = list(scopes)
        return Retrieved([h for h in self.hits if any(s.document_id == h.document_id for s in scopes)], "hybrid", ())


def documents(owned: dict[str, list[str]], hits: list[Hit]) -> tuple[DocumentsTool, Search]:
    search = Search(hits)
    found = DocumentSearch(Statuses(), search, passages=5, passage_tokens=500, count=lambda t: len(t.split()))
    return DocumentsTool(Library(owned), found), search


def hit(doc: str, page: int, text: str) -> Hit:
    return Hit(f"{doc}-{page}", doc, page, 0, text, "", 0, 1.0, filename=f"{doc[-1]}.pdf")


async def test_search_reads_only_the_callers_documents_and_cites_file_and_page() -> None:
    tool, search = documents({"u": [A], "other": [B]}, [hit(A, 3, "rent is due on the first"), hit(B, 1, "secret")])
    result = await tool.run_for("u", {"query": "when is rent due"}, "call_1")
    assert result.outcome == "ok" and result.events == ()
    assert "[a.pdf p.3]" in result.text and "rent is due on the first" in result.text
    assert "secret" not in result.text
    assert [(s.document_id, s.user_id) for s in search.scopes] == [(A, "u")]


async def test_search_says_plainly_when_there_is_nothing_to_search_or_nothing_found() -> None:
    tool, _ = documents({"u": [A]}, [])
    assert (await tool.run_for("nobody", {"query": "q"}, "k")).text == "The user has no documents to search."
    found = await tool.run_for("u", {"query": "q"}, "k")
    assert found.outcome == "ok" and found.text.startswith("Nothing in the user's documents matched.")


async def test_search_with_its_store_away_is_not_sent() -> None:
    class Away:
        async def document_ids(self, user_id: str) -> list[str]:
            raise StoreUnavailable("cassandra away")

    search = DocumentSearch(Statuses(), Search([]), passages=5, passage_tokens=500, count=len)
    tool = DocumentsTool(Away(), search)
    with pytest.raises(NotSent):
        await tool.run_for("u", {"query": "q"}, "k")


class Memories:
    def __init__(self, facts: dict[str, list[str]]) -> None:
        self.by_user = facts

    async def facts(self, user_id: str) -> list[str]:
        return list(self.by_user.get(user_id, []))


def memory(name: str, facts: dict[str, list[str]]) -> MemoryTool:
    return MemoryTool(name, Memories(facts), lambda: sealing.UNSEALED)


def snapshot(result: ToolResult) -> MemoryUpdated:
    (event,) = result.events
    assert isinstance(event, MemoryUpdated)
    return event


async def test_remember_returns_the_callers_whole_memory_with_the_fact_added_and_writes_nothing() -> None:
    facts = {"u": ["likes tea"], "other": ["lives in Oslo"]}
    result = await memory("remember", facts).run_for("u", {"fact": " works nights "}, "call_1")
    event = snapshot(result)
    assert result.outcome == "ok" and event.user_id == "u"
    assert [f.text for f in event.facts] == ["likes tea", "works nights"]
    assert facts == {"u": ["likes tea"], "other": ["lives in Oslo"]}  # changed only through the returned event
    again = snapshot(await memory("remember", facts).run_for("u", {"fact": "works nights"}, "call_1"))
    assert again.event_id == event.event_id  # derived from the call: a copy readers drop
    assert [f.fact_id for f in again.facts] == [f.fact_id for f in event.facts]


async def test_remember_of_a_known_fact_changes_nothing_and_a_full_memory_is_said_so() -> None:
    known = await memory("remember", {"u": ["Likes tea"]}).run_for("u", {"fact": "likes tea"}, "k")
    assert known.outcome == "ok" and known.events == ()
    full = await memory("remember", {"u": [f"fact {i}" for i in range(MAX_FACTS)]}).run_for("u", {"fact": "one more"}, "k")
    assert full.outcome == "error" and full.events == () and "full" in full.error


async def test_forget_takes_out_the_matching_fact_and_says_when_none_matches() -> None:
    result = await memory("forget", {"u": ["likes tea", "works nights"]}).run_for("u", {"fact": "Likes Tea"}, "k")
    assert [f.text for f in snapshot(result).facts] == ["works nights"]
    missing = await memory("forget", {"u": ["likes tea"]}).run_for("u", {"fact": "hates tea"}, "k")
    assert missing.outcome == "error" and missing.events == ()


@pytest.mark.parametrize("arguments", [{}, {"fact": 3}, {"fact": None}, {"fact": ["a"]}, {"fact": "  "}, {"fact": "x" * 501},
                                       {"query": "likes tea"}])
async def test_a_hostile_fact_is_an_error_naming_the_argument_never_an_exception(arguments: dict[str, Any]) -> None:
    for name in ("remember", "forget"):
        result = await memory(name, {"u": ["likes tea"]}).run_for("u", arguments, "k")
        assert result.outcome == "error" and "`fact`" in result.error and result.events == ()
        assert "x" * 20 not in result.error  # the value itself is never quoted back


@pytest.mark.parametrize("arguments", [{}, {"query": 3}, {"query": ""}, {"query": "q" * 501}, {"query": {"a": 1}}])
async def test_a_hostile_query_is_an_error_naming_the_argument(arguments: dict[str, Any]) -> None:
    tool, search = documents({"u": [A]}, [hit(A, 1, "words")])
    result = await tool.run_for("u", arguments, "k")
    assert result.outcome == "error" and "`query`" in result.error and search.scopes == []
