"""A turn's document search: coverage, the note the model and the user read, passages in budget and in order."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from documents.hits import Hit, Scope
from documents.retrieval import Retrieved
from parley.errors import StoreUnavailable
from streams.document_search import DocumentSearch, Status, in_prompt_order, note, coverage, within_budget
from streams.prompt import documents_text

A, B = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"


def hit(doc: str, page: int, ordinal: int = 0, text: str = "some words here", score: float = 1.0) -> Hit:
    return Hit(f"{doc}-{page}-{ordinal}", doc, page, ordinal, text, "", 0, score, filename=f"{doc[-1]}.pdf")


class Statuses:
    def __init__(self, found: dict[str, Status] | Exception) -> None:
        self.found = found

    async def statuses(self, user_id: str, document_ids: Sequence[str]) -> dict[str, Status]:
        if isinstance(self.found, Exception):
            raise self.found
        return {d: s for d, s in self.found.items() if d in document_ids}


class Search:
    def __init__(self, hits: list[Hit] | Exception, path: str = "hybrid") -> None:
        self.hits, self.path, self.scopes = hits, path, None

    async def retrieve(self, query: str, scopes: Sequence[Scope], limit: int) -> Retrieved:
        self.scopes = list(scopes)
        if isinstance(self.hits, Exception):
            raise self.hits
        return Retrieved(self.hits[:limit], self.path, ())


def words(text: str) -> int:
    return len(text.split())


def test_a_document_still_processing_is_searched_as_far_as_it_is_ready_and_the_note_says_so() -> None:
    found = {A: Status(A, "report.pdf", "processing", 12, 150), B: Status(B, "b.pdf", "ready", 3, 3)}
    docs = coverage([A, B, "gone"], found)
    assert [d.status for d in docs] == ["processing", "ready", "missing"]
    told = note(docs)
    assert "report.pdf: pages 1–12 of 150 indexed" in told
    assert "b.pdf" not in told  # wholly searchable: nothing to say
    assert "not available" in told


async def test_scopes_stop_at_the_ready_mark_and_skip_failed_and_other_users_documents() -> None:
    found = {A: Status(A, "a.pdf", "processing", 2, 10), B: Status(B, "b.pdf", "failed", 0, 0)}
    search = Search([hit(A, 1)])
    out = await DocumentSearch(Statuses(found), search, passages=5, passage_tokens=500, count=words).search("u", [A, B], "q")
    assert search.scopes == [Scope(A, 2, "a.pdf", user_id="u")]
    assert out.path == "hybrid" and [p.page for p in out.passages] == [1]
    assert out.passages[0].label == "[a.pdf p.1]"


async def test_nothing_searchable_yet_gives_no_passages_and_a_note() -> None:
    found = {A: Status(A, "a.pdf", "processing", 0, 0)}
    search = Search([hit(A, 1)])
    out = await DocumentSearch(Statuses(found), search, passages=5, passage_tokens=500, count=words).search("u", [A], "q")
    assert search.scopes is None and out.path == "none" and not out.passages
    assert "no page is searchable yet" in out.note


@pytest.mark.parametrize("failure", ["statuses", "search"])
async def test_a_search_that_fails_never_fails_the_turn(failure: str) -> None:
    found = {A: Status(A, "a.pdf", "ready", 3, 3)}
    statuses = Statuses(StoreUnavailable("down") if failure == "statuses" else found)
    search = Search(RuntimeError("both down") if failure == "search" else [hit(A, 1)])
    out = await DocumentSearch(statuses, search, passages=5, passage_tokens=500, count=words).search("u", [A], "q")
    assert out.path == "none" and not out.passages and "could not be searched" in out.note


def test_passages_fit_the_budget_in_rank_order_then_render_in_document_and_page_order() -> None:
    ranked = [hit(B, 9, text="x " * 10), hit(A, 5, text="y " * 200), hit(A, 2, text="z " * 10)]
    kept = within_budget(ranked, 60, words)
    assert [h.page for h in kept] == [9, 2]  # the long one did not fit; the next one still did
    assert [(h.document_id, h.page) for h in in_prompt_order(kept, [A, B])] == [(A, 2), (B, 9)]


def test_the_documents_block_quotes_passages_as_untrusted_material_with_labels() -> None:
    from schemas.events import Passage

    block = documents_text([Passage(label="[a.pdf p.2]", document_id=A, chunk_id="c", page=2, text="Revenue rose.")], "a.pdf: pages 1–2 of 9 indexed")
    assert "not instructions" in block and "[a.pdf p.2]\n<<<\nRevenue rose.\n>>>" in block
    assert block.endswith("Coverage: a.pdf: pages 1–2 of 9 indexed")
    assert documents_text([], "") == ""
