"""A conversation's Markdown export (gateway/export.py): every branch, depth first, each alternative labelled."""

from gateway.export import markdown


def _m(mid: str, parent: str | None, role: str, content: str, model: str | None = None) -> dict:
    return {"id": mid, "parent_id": parent, "role": role, "content": content, "model": model}


def test_every_branch_reads_in_order_with_its_version_and_the_selected_branch_marked() -> None:
    doc = {
        "title": "Trip",
        "selected_leaf_id": "r2",
        "messages": [
            _m("m1", None, "user", "Lisbon?"),
            _m("r1", "m1", "assistant", "Go to Belém.", "small-model"),
            _m("r1b", "m1", "assistant", "Go to Alfama."),
            _m("m2", None, "user", "Porto?"),  # an edit of the first message
            _m("r2", "m2", "assistant", ""),
        ],
    }
    text = markdown(doc)
    order = [text.index(s) for s in ("Lisbon?", "Belém", "Alfama", "Porto?", "*(no text)*")]
    assert order == sorted(order) and text.startswith("# Trip\n")
    assert "### You · version 1 of 2\n" in text and "### You · version 2 of 2 ★\n" in text
    assert "### Assistant (small-model) · version 1 of 2\n" in text and "### Assistant · version 2 of 2\n" in text
    assert "### Assistant ★\n" in text  # the reply to the edit: the selected leaf, an only child


def test_a_message_whose_parent_is_not_in_the_export_is_a_root_and_an_untitled_one_says_so() -> None:
    text = markdown({"title": "", "selected_leaf_id": None, "messages": [_m("x", "gone", "user", "hello")]})
    assert text.startswith("# Untitled conversation") and "### You\n\nhello" in text
