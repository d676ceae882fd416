"""A client's message key never derives another message's id (review L1: ``k:reply`` as a message key was
``k``'s reply id, so a post could overwrite a reply's row)."""

from __future__ import annotations

import pytest

from gateway.errors import PayloadTooLarge, Unprocessable
from gateway.validation import client_key
from parley import ids


def test_the_collision_the_suffix_would_make_is_real() -> None:
    assert ids.user_message_id("c", "m1:reply") == ids.reply_id("c", "m1")


@pytest.mark.parametrize("key", ["m1:reply", ":reply", "a:b:reply"])
def test_a_key_ending_as_reply_ids_do_is_refused(key: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        client_key({"client_message_id": key}, 200)
    assert refused.value.code == "reserved_key"


@pytest.mark.parametrize("key", ["m1", "m1:replyx", "reply", "m1:Reply-2", "openai:abc"])
def test_other_keys_are_taken(key: str) -> None:
    assert client_key({"client_message_id": key}, 200) == key


def test_the_usual_string_rules_still_hold() -> None:
    with pytest.raises(Unprocessable):
        client_key({}, 200)
    with pytest.raises(PayloadTooLarge):
        client_key({"client_message_id": "x" * 201}, 200)
