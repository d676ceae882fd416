"""Reading ChatGPT's and Parley's exports (gateway/import_formats.py): what is kept, where it hangs, what refuses the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway import imports
from gateway.validation import parsed_json
from gateway.import_formats import MAX_MESSAGE_BYTES, Refused, parse
from schemas.events import ConversationArchived, ConversationCreated, LeafSelected, MessagePosted
from streams import tree

FIXTURE = Path(__file__).parents[2] / "fixtures" / "imports" / "chatgpt_conversations.json"
NOW = 1_800_000_000_000_000


def export() -> list:
    return json.loads(FIXTURE.read_text())


def test_a_chatgpt_export_keeps_every_branch_the_visible_text_and_the_selected_leaf() -> None:
    trip, bread = parse(export(), now_us=NOW)
    by_id = {m.source_id: m for m in trip.messages}
    assert list(by_id) == ["u1", "a1", "a2", "u2", "a3"]  # root, hidden system, the tool call and its result dropped
    assert trip.dropped == 4
    assert by_id["u1"].parent_source_id is None  # under the dropped root and system message: a root
    assert by_id["a1"].parent_source_id == by_id["a2"].parent_source_id == "u1"  # the regenerated reply: a branch
    assert by_id["a3"].parent_source_id == "u2"  # through the dropped call and tool result
    assert by_id["u2"].content == "What is this tile pattern called?"  # the image pointer is not text
    assert (by_id["a2"].role, by_id["a2"].model, by_id["u1"].model) == ("assistant", "gpt-4o", None)
    assert trip.leaf_source_id == "a3"
    assert (trip.title, trip.archived, trip.created_us) == ("Trip to Lisbon", False, 1_717_000_000_500_000)
    assert by_id["u1"].created_us == 1_717_000_010_000_000
    assert by_id["a3"].created_us == by_id["u2"].created_us + 1  # no time in the file: just after its parent
    assert bread.archived and bread.leaf_source_id == "ans"


def test_the_events_rebuild_the_same_tree_with_ids_derived_from_the_sources() -> None:
    trip = parse(export(), now_us=NOW)[0]
    events = imports.events_for("u-1", "c-1", trip, "")
    again = imports.events_for("u-1", "c-1", trip, "")
    assert [e.event_id for e in events] == [e.event_id for e in again]
    assert [e.message_id for e in events if isinstance(e, MessagePosted)] == [e.message_id for e in again if isinstance(e, MessagePosted)]
    assert isinstance(events[0], ConversationCreated) and isinstance(events[-1], LeafSelected)
    state = tree.fold(events)
    leaf = state.messages[state.selected_leaf_id]
    assert [m.content for m in tree.branch(state, leaf.message_id)] == [
        "Plan three days in Lisbon with a tram ride",
        "Regenerated: start in Belem, then tram 28 to Graca.",
        "What is this tile pattern called?",
        "Those are azulejos, in a pattern called padrao.",
    ]
    roots = tree.children(state, None)
    assert len(roots) == 1 and len(tree.children(state, roots[0].message_id)) == 2
    assert all(e.occurred_at < events[-1].occurred_at for e in events[:-1])  # the file's leaf wins over the last post
    bread = parse(export(), now_us=NOW)[1]
    assert isinstance(imports.events_for("u-1", "c-2", bread, "")[-1], ConversationArchived)


def test_parleys_own_export_round_trips() -> None:
    doc = {
        "format": "parley.conversation/1",
        "id": "3f1c0c0e-0000-4000-8000-00000000000a",
        "title": "Mine",
        "created_at": "2026-01-02T03:04:05+00:00",
        "archived": False,
        "selected_leaf_id": "m3",
        "messages": [
            {"id": "m1", "parent_id": None, "role": "user", "content": "hello", "created_at": "2026-01-02T03:04:06+00:00"},
            {"id": "m2", "parent_id": "m1", "role": "assistant", "content": "hi", "model": "small-1", "created_at": "2026-01-02T03:04:07+00:00"},
            {"id": "m3", "parent_id": "m1", "role": "assistant", "content": "hey", "created_at": "2026-01-02T03:04:08+00:00"},
            {"id": "m4", "parent_id": "m1", "role": "assistant", "content": None, "created_at": None},
        ],
    }
    (c,) = parse(doc, now_us=NOW)
    assert [(m.source_id, m.parent_source_id) for m in c.messages] == [("m1", None), ("m2", "m1"), ("m3", "m1")]
    assert c.leaf_source_id == "m3" and c.dropped == 1 and c.messages[1].model == "small-1"
    assert len(parse({"conversations": [doc, {**doc, "id": "other"}]}, now_us=NOW)) == 2


def _broken(edit) -> list:
    doc = export()
    edit(doc)
    return doc


@pytest.mark.parametrize(
    ("edit", "code", "where"),
    [
        (lambda d: d[1]["mapping"]["ans"].update(parent="nowhere"), "invalid_export", "[1].mapping.ans.parent"),
        (lambda d: d[1]["mapping"]["r"].update(parent="ans"), "invalid_tree", "[1]"),
        (lambda d: d[0].update(current_node="ghost"), "invalid_export", "[0].current_node"),
        (lambda d: d[0]["mapping"]["u1"]["message"].update(create_time="yesterday"), "invalid_export", "[0].mapping.u1.message.create_time"),
        (lambda d: d[0]["mapping"]["u1"]["message"].update(create_time=1e300), "invalid_export", "[0].mapping.u1.message.create_time"),
        (lambda d: d[0]["mapping"]["u1"]["message"]["content"].update(parts="text"), "invalid_export", "[0].mapping.u1.message.content.parts"),
        (lambda d: d[0]["mapping"]["u1"]["message"]["content"].update(parts=["x" * (MAX_MESSAGE_BYTES + 1)]), "message_too_large", "[0].mapping.u1.message.content.parts"),
        (lambda d: d[0]["mapping"]["u1"]["message"].update(author="user"), "invalid_export", "[0].mapping.u1.message.author"),
        (lambda d: d[0].update(title=["not", "text"]), "invalid_export", "[0].title"),
        (lambda d: d[1].update(id=d[0]["id"], conversation_id=d[0]["id"]), "invalid_export", "[1].id"),
        (lambda d: d[0]["mapping"].update({"x": {"id": "y", "message": None, "parent": None}}), "invalid_export", "[0].mapping.x"),
        (lambda d: d[1].update(mapping={}), "invalid_export", "[1].mapping"),
    ],
)
def test_a_bad_node_anywhere_refuses_the_whole_file_naming_where_never_what(edit, code, where) -> None:
    with pytest.raises(Refused) as refused:
        parse(_broken(edit), now_us=NOW)
    assert (refused.value.code, refused.value.where) == (code, where)
    assert "Lisbon" not in str(refused.value) and "sourdough" not in str(refused.value).lower()


@pytest.mark.parametrize("document", [{}, {"hello": 1}, "text", 3, None, []])
def test_what_is_no_export_is_refused(document) -> None:
    with pytest.raises(Refused) as refused:
        parse(document, now_us=NOW)
    assert refused.value.code in ("unknown_format", "empty_export")


def test_a_conversation_without_text_is_refused_not_imported_empty() -> None:
    doc = export()[1]
    for node in doc["mapping"].values():
        if node["message"]:
            node["message"]["content"]["parts"] = ["  "]
    with pytest.raises(Refused) as refused:
        parse(doc, now_us=NOW)
    assert refused.value.code == "empty_conversation"


def test_a_zip_bomb_is_refused_as_it_inflates() -> None:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("export/conversations.json", b"[" + b" " * 5_000_000 + b"]")
    data = out.getvalue()
    assert len(data) < 100_000
    from gateway.errors import PayloadTooLarge

    with pytest.raises(PayloadTooLarge):
        imports._unzipped(data, 1_000_000)
    assert imports._unzipped(data, 10_000_000) == []
    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("chatgpt/conversations.json", json.dumps(export()))
    assert len(imports._unzipped(good.getvalue(), 10_000_000)) == 2


def test_deep_nesting_and_huge_numbers_are_bad_json_not_a_crash() -> None:
    from gateway.errors import BadRequest

    for raw in (b"[" * 100_000, b"[1" + b"0" * 5000 + b"]", b"\xff"):
        with pytest.raises(BadRequest):
            parsed_json(raw)



def test_an_import_past_its_message_budget_is_refused_whole(monkeypatch) -> None:
    from gateway import import_formats

    monkeypatch.setattr(import_formats, "MAX_MESSAGES", 6)  # the fixture keeps 5 + 2
    with pytest.raises(Refused) as refused:
        parse(export(), now_us=NOW)
    assert refused.value.code == "too_many_messages"
    monkeypatch.setattr(import_formats, "MAX_MESSAGES", 7)
    assert len(parse(export(), now_us=NOW)) == 2
