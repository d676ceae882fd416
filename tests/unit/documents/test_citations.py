"""Citations are what the reply drew on among the passages shown: by label or by shared words, numbered by first use."""

from __future__ import annotations

from documents.citations import cite
from schemas.events import Passage, Retrieval

A = "00000000-0000-0000-0000-00000000000a"


def passage(page: int, text: str, chunk: str | None = None) -> Passage:
    return Passage(label=f"[acme.pdf p.{page}]", document_id=A, chunk_id=chunk or f"c{page}", page=page, text=text, filename="acme.pdf")


SHOWN = Retrieval(
    path="hybrid",
    passages=[
        passage(3, "Overview of the year. Revenue in the third quarter grew to 4.2 million euros, led by the Nordic region."),
        passage(7, "The warranty covers parts and labour for 24 months from delivery."),
    ],
)


def test_a_reply_restating_a_passage_cites_it_and_quotes_the_sentence_it_used() -> None:
    cited, status = cite("Third quarter revenue grew to 4.2 million euros, mostly from the Nordic region.", SHOWN)
    assert status == "cited"
    assert [(c.number, c.page, c.chunk_id) for c in cited] == [(1, 3, "c3")]
    assert cited[0].text.startswith("Revenue in the third quarter grew to 4.2 million euros")
    assert cited[0].text in SHOWN.passages[0].text  # the quote is the page's own text


def test_labels_the_model_wrote_count_and_numbering_follows_first_use() -> None:
    reply = "Parts are covered for two years [acme.pdf p.7]. Also, third quarter revenue grew to 4.2 million euros in the Nordic region."
    cited, status = cite(reply, SHOWN)
    assert [c.page for c in cited] == [7, 3] and [c.number for c in cited] == [1, 2]


def test_a_label_naming_a_page_that_was_not_shown_cites_nothing() -> None:
    cited, status = cite("See [acme.pdf p.99] for details.", SHOWN)
    assert cited == [] and status == "uncited"


def test_a_reply_that_used_no_passage_says_so_and_a_turn_without_documents_has_no_status() -> None:
    assert cite("I do not know.", SHOWN) == ([], "uncited")
    assert cite("Paris is the capital of France.", None) == ([], "")


def test_a_passage_is_cited_once_however_often_it_is_used() -> None:
    reply = "Revenue grew to 4.2 million euros in the third quarter. The Nordic region led third quarter revenue growth to 4.2 million."
    cited, _ = cite(reply, SHOWN)
    assert [c.chunk_id for c in cited] == ["c3"]
