"""Conversation search's pure parts: words and their forms, typo matching, ranking, snippets, and which
events the search processor turns into which index calls."""

from __future__ import annotations

import uuid

import pytest

from schemas import events as ev
from streams.search_indexer import SearchIndexer
from streams.search_rank import EXACT, FUZZY, PREFIX, Posting, rank
from streams.search_text import close, deletions, indexed, matches, query, snippet, term, variants, words


def test_words_fold_case_drop_stopwords_and_keep_codes_whole() -> None:
    assert words("The Reports were REPORTED in Q3-2024 by a cost-cutting team") == [
        "reports", "reported", "q3-2024", "cost", "cutting", "team"
    ]
    assert term("reports") == term("reported") == "w:report"
    assert term("v2.1") == "w:v2.1"


def test_a_word_is_indexed_under_its_typing_prefixes_and_deletion_forms() -> None:
    forms = variants("python")
    assert {"p:pyt", "p:pyth", "p:pytho"} <= forms and "p:python" not in forms and "p:py" not in forms
    assert {"d:python", "d:ython", "d:pyton", "d:pytho"} <= forms
    assert variants("cat") == set()  # too short to complete or to mistype
    assert variants("word") == {"p:wor", "d:word"}  # looked up by a typed word one longer, never by its own deletions
    assert deletions("abc") == {"bc", "ac", "ab"}


def test_a_text_posts_each_term_once_with_its_count() -> None:
    found = indexed("Pythons and python: python everywhere")
    assert found.tf == {"w:python": 3, "w:everywher": 1}
    assert found.length == 4
    chars, forms = found.vocabulary["w:python"]
    assert chars == 6 and "p:pytho" in forms and "d:pythons" in forms  # both spellings' forms reach the one term


@pytest.mark.parametrize(
    "a, b, near",
    [
        ("python", "pyhton", True),  # neighbours swapped
        ("python", "pythn", True),  # one left out
        ("python", "pythonn", True),  # one added
        ("python", "pxthon", True),  # one replaced
        ("python", "pxthxn", False),
        ("python", "pyth", False),
        ("python", "jython2", False),
    ],
)
def test_close_is_one_edit(a: str, b: str, near: bool) -> None:
    assert close(a, b) is near and close(b, a) is near


def test_the_forms_of_a_typo_meet_the_forms_of_the_word() -> None:
    for typo in ("pyhton", "pythn", "pythonn", "pxthon"):
        (q,) = query(typo + " ")
        assert q.fuzzy & variants("python"), typo
    (q,) = query("pxthxn ")
    assert not q.fuzzy & variants("python")


def test_the_last_word_is_a_prefix_only_while_it_is_being_typed() -> None:
    typing = query("deploy kube")
    assert [w.prefix for w in typing] == [None, "p:kube"]
    assert query("deploy kube ")[-1].prefix is None
    assert query("ku")[0].prefix is None  # two letters complete too many words
    assert query("the of and") == []  # nothing searchable


def _p(cid: str, mid: str, tf: int = 1, length: int = 10) -> Posting:
    return Posting(cid, mid, tf, length)


def test_an_exact_match_ranks_above_any_typo_whatever_the_counts() -> None:
    hits = rank([{
        "w:python": (EXACT, [_p("c1", "m1", tf=1, length=200)]),
        "w:pythn": (FUZZY, [_p("c2", "m2", tf=5, length=5)]),
    }])
    assert [h.conversation_id for h in hits] == ["c1", "c2"]
    assert hits[0].score > hits[1].score


def test_more_words_matched_rank_higher_and_a_title_counts_more_than_a_message() -> None:
    hits = rank([
        {"w:deploy": (EXACT, [_p("c1", "m1"), _p("c2", "m2"), _p("c3", "c3")])},
        {"w:kubernet": (PREFIX, [_p("c1", "m1")])},
    ])
    assert hits[0].conversation_id == "c1" and hits[0].message_id == "m1"
    assert [h.conversation_id for h in hits[1:]] == ["c3", "c2"]  # the title beats a message of the same words
    assert hits[1].message_id is None  # only its title matched


def test_a_conversation_is_one_result_its_best_message() -> None:
    hits = rank([{"w:report": (EXACT, [_p("c1", "m1", tf=1, length=50), _p("c1", "m2", tf=3, length=8)])}])
    assert [(h.conversation_id, h.message_id) for h in hits] == [("c1", "m2")]
    assert rank([]) == [] and rank([{"w:x": (EXACT, [])}]) == []


def test_a_rarer_word_weighs_more() -> None:
    common = [_p(f"c{i}", f"m{i}") for i in range(10)]
    hits = rank([{"w:the": (EXACT, common)}, {"w:zebra": (EXACT, [_p("c7", "m7")])}])
    assert hits[0].conversation_id == "c7"


def test_the_snippet_is_cut_around_the_first_word_found() -> None:
    text = "lorem ipsum " * 30 + "we should deploy the kubernetes cluster on friday " + "dolor sit amet " * 30
    cut = snippet(text, query("kubernetes"))
    assert "kubernetes" in cut and cut.startswith("…") and cut.endswith("…") and len(cut) <= 170
    assert "kubernetes" in snippet(text, query("kubernets"))  # a typo finds its word
    assert "kubernetes" in snippet(text, query("kuber"))  # and a word being typed
    assert snippet("short text", query("absent")) == "short text"
    assert matches("reported", query("reports ")[0])


class Rows:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def index(self, user_id: str, conversation_id: str, message_id: str, text: str) -> None:
        self.calls.append(("index", message_id, text))

    async def withdraw(self, user_id: str, conversation_id: str, message_id: str) -> None:
        self.calls.append(("withdraw", message_id))

    async def drop(self, user_id: str, conversation_id: str) -> None:
        self.calls.append(("drop", conversation_id))


async def test_the_processor_indexes_titles_messages_and_replies_and_drops_what_goes() -> None:
    rows = Rows()
    indexer = SearchIndexer(rows)
    c, u = str(uuid.uuid4()), "u1"
    common = {"conversation_id": c, "user_id": u}
    events: list[ev.Event] = [
        ev.ConversationCreated(**common, title="Trip"),
        ev.MessagePosted(**common, message_id="m1", client_message_id="k1", content="plan a trip"),
        ev.MessagePosted(**common, message_id="s1", client_message_id="k2", role="system", content="be brief"),
        ev.GenerationRequested(**common, request_id="r1", parent_id="m1", client_message_id="k1"),
        ev.GenerationCompleted(**common, request_id="r1", parent_id="m1", finish_reason="stop", content="Go to Rome"),
        ev.GenerationCompleted(**common, request_id="r2", parent_id="m1", finish_reason="content_filter", content="x"),
        ev.GenerationModerated(**common, request_id="r1", parent_id="m1", direction="output", stage="final", action="cut"),
        ev.ConversationRenamed(**common, title="Rome trip"),
        ev.ConversationDeleted(**common),
    ]
    for e in events:
        assert await indexer.handle(e) == []
    assert rows.calls == [
        ("index", c, "Trip"), ("index", "m1", "plan a trip"), ("index", "r1", "Go to Rome"), ("withdraw", "r2"),
        ("withdraw", "r1"), ("index", c, "Rome trip"), ("drop", c),
    ]
