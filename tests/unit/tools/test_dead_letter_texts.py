"""What a dead letter says about a user's record is shredded with the user (review H8.7), and ``parley audit
erasure`` finds what is not (tools/erasure_audit.py ``dead_letter_problems``).

A letter for a record that names its owner keeps only the error's class in the clear; the error's words
(which may quote the record) are sealed under the owner's key in ``detail``. The key service is the
reversible stand-in of tests/unit/schemas/test_sealing.py.
"""

from __future__ import annotations

from parley.consumer import dead_letter_for
from schemas import codec, sealing
from schemas.events import DeadLetter, MessagePosted
from tests.unit.schemas.test_sealing import CID, MID, Reversible, keys  # noqa: F401 (the fixture)
from tools.erasure_audit import dead_letter_problems


def _posted(user: str, content: str) -> bytes:
    return codec.encode(MessagePosted(conversation_id=CID, user_id=user, message_id=MID, content=content, client_message_id="c"))


def _letter(value: bytes | None, error: Exception) -> DeadLetter:
    return dead_letter_for(topic="chat.events", partition=0, offset=7, key=b"k", value=value, error=error, consumer="g")


def test_what_an_error_says_about_a_users_record_is_sealed_under_their_key(keys: Reversible) -> None:
    letter = _letter(_posted("u1", "a question"), ValueError("the guard answered: 'the secret plan'"))
    assert (letter.user_id, letter.error, letter.detail) == ("u1", "ValueError", "the guard answered: 'the secret plan'")
    data = codec.encode(letter)
    assert b"secret plan" not in data
    assert codec.decode(data) == letter  # the operator reads it while the user exists
    keys.erased.add("u1")
    assert codec.decode(data).detail == sealing.ERASED  # type: ignore[attr-defined]


def test_bytes_that_name_no_owner_keep_the_codecs_own_words(keys: Reversible) -> None:
    letter = _letter(b"\xc3\x01junk", codec.NotSingleObject("not Avro single-object encoding"))
    assert (letter.user_id, letter.detail, letter.error) == ("", "", "not Avro single-object encoding")
    assert codec.decode(codec.encode(letter)) == letter  # nothing to seal, nothing refused


def test_the_erasure_audit_reports_what_a_dead_letter_still_says_about_an_erased_user(keys: Reversible) -> None:
    sealed = _letter(_posted("u1", "a question"), ValueError("quoting 'the secret plan'"))
    other = _letter(_posted("u2", "theirs"), ValueError("quoting u2"))
    # Before details were sealed: the text in the clear, no owner named, the record the user's.
    older = DeadLetter(source_topic="chat.events", source_partition=0, source_offset=1, error_type="invalid",
                       error="MessagePosted: quoting 'the secret plan'", raw_value=_posted("u1", "a question"))  # fmt: skip
    sealing.install(None)
    clear = _letter(_posted("u1", "written with sealing off"), ValueError("x"))  # its record holds plain text
    sealing.install(keys)
    decoded = [codec.decode(codec.encode(x)) for x in (sealed, other, older, clear)]
    assert [dead_letter_problems(x, "u1") for x in decoded] == [1, 0, 1, 2]  # type: ignore[arg-type]
    keys.erased.add("u1")
    decoded = [codec.decode(codec.encode(x)) for x in (sealed, other, older, clear)]
    assert [dead_letter_problems(x, "u1") for x in decoded] == [0, 0, 1, 1]  # type: ignore[arg-type]
