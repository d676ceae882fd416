"""Sealed values are bound to their place (review M6): the real key service (parley/keys.py), its AES-GCM
and its sub-keys, over the in-memory ``data_keys`` of test_key_service.

A value opens only at the field or cell, and the row, it was sealed for; equal text in two places
seals to unequal values even deterministically; values of the first format (``\\x00s1:``, bound to
owner and key version only), which topics kept for good still hold, open wherever they are read.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from documents.blobs import original_at
from parley.keys import KeyService, LocalKms
from schemas import codec, sealing
from schemas.events import MessagePosted
from tests.unit.parley.test_key_service import Table, kms, table  # noqa: F401 (the fixtures)

CID = "00000000-0000-0000-0000-0000000000c1"
M1, M2 = "00000000-0000-0000-0000-0000000000a1", "00000000-0000-0000-0000-0000000000a2"
E1, E2 = "00000000-0000-0000-0000-0000000000e1", "00000000-0000-0000-0000-0000000000e2"


@pytest.fixture
def service(table: Table, kms: LocalKms) -> Iterator[KeyService]:
    made = KeyService(lambda: table, kms, "ks")  # type: ignore[arg-type]
    yield made
    made.close()


def _raw_key(table: Table, kms: LocalKms, user: str) -> bytes:
    row = table.rows[user][1]
    return kms.unwrap(user, row.kek_id, row.wrapped)


def _first_format(raw: bytes, user: str, text: str) -> str:
    """A value as parley/keys.py sealed it before places: AES-GCM under the data key itself, ``user:1`` as
    associated data."""
    nonce = os.urandom(12)
    body = base64.urlsafe_b64encode(nonce + AESGCM(raw).encrypt(nonce, text.encode(), f"{user}:1".encode())).decode().rstrip("=")
    return f"{sealing.LEGACY_PREFIX}{user}:1:{body}"


def test_a_value_opens_only_at_the_place_it_was_sealed_for(service: KeyService) -> None:
    here = sealing.cell_at("messages", "content", M1)
    value = service.seal("u1", "I live in Lisbon", at=here, deterministic=True)
    assert value.startswith(sealing.PREFIX) and service.open(value, at=here) == "I live in Lisbon"
    elsewhere = [
        sealing.cell_at("messages", "content", M2),  # another row of the same column
        sealing.cell_at("conversations", "title", M1),  # another column, the same id
        sealing.cell_at("user_memory", "text", M1),
        sealing.field_at("MessagePosted", "content", M1),  # the event field its text came from
    ]
    for at in elsewhere:
        with pytest.raises(sealing.Unopenable):
            service.open(value, at=at)
    event_value = service.seal("u1", "I live in Lisbon", at=sealing.field_at("MessagePosted", "content", E1))
    with pytest.raises(sealing.Unopenable):
        service.open(event_value, at=sealing.field_at("MessagePosted", "content", E2))


def test_equal_text_in_two_places_seals_to_unequal_values_even_deterministically(service: KeyService) -> None:
    def seal(at: str) -> str:
        return service.seal("u1", "yes", at=at, deterministic=True)

    title, content = sealing.cell_at("conversations", "title", M1), sealing.cell_at("messages", "content", M1)
    assert seal(content) == seal(content)  # a replay writes the same cell
    values = {seal(title), seal(content), seal(sealing.cell_at("messages", "content", M2)), seal(sealing.cell_at("user_memory", "text", M1))}
    assert len(values) == 4
    nonces = {base64.urlsafe_b64decode(v.rsplit(":", 1)[1] + "==")[:12] for v in values}
    assert len(nonces) == 4  # the nonce derives from the place too, not from the text alone


def test_the_data_key_itself_seals_nothing_new(service: KeyService, table: Table, kms: LocalKms) -> None:
    """New values are sealed under an HKDF sub-key: the data key, which the first format used directly,
    does not open them."""
    at = sealing.cell_at("messages", "content", M1)
    value = service.seal("u1", "text", at=at)
    sealed = base64.urlsafe_b64decode(value.rsplit(":", 1)[1] + "==")
    from parley.keys import _associated

    with pytest.raises(InvalidTag):
        AESGCM(_raw_key(table, kms, "u1")).decrypt(sealed[:12], sealed[12:], _associated("u1", 1, at))


def test_values_of_the_first_format_still_open_wherever_they_are_read(service: KeyService, table: Table, kms: LocalKms) -> None:
    service.seal("u1", "makes the key", at="x")
    raw = _raw_key(table, kms, "u1")
    old = _first_format(raw, "u1", "sealed before places")
    assert sealing.is_sealed(old) and sealing.owner_of(old) == "u1"
    assert service.open(old, at=sealing.cell_at("messages", "content", M1)) == "sealed before places"
    assert service.open(old, at=sealing.field_at("MessagePosted", "content", E1)) == "sealed before places"
    nonce = os.urandom(12)
    old_file = sealing.LEGACY_BYTES_PREFIX + b"u1:1:" + nonce + AESGCM(raw).encrypt(nonce, b"%PDF-1.7", b"u1:1")
    assert service.open_bytes(old_file, at=original_at(M1)) == b"%PDF-1.7"
    # An old event on a kept topic: its sealed field decodes as it always did.
    sealing.install(None)
    data = codec.encode(MessagePosted(event_id=E1, conversation_id=CID, user_id="u1", message_id=M1, content=old, client_message_id="c"))
    sealing.install(service)
    try:
        assert codec.decode(data).content == "sealed before places"  # type: ignore[attr-defined]
    finally:
        sealing.install(None)
    service.erase("u1")
    assert service.open(old, at="anywhere") == sealing.ERASED


def test_a_sealed_value_copied_into_another_event_is_bad_input(service: KeyService) -> None:
    """A record whose sealed field was sealed for another event (a value lifted from one record into a
    forged one) is refused by the codec (dead-lettered, never read as the user's text)."""
    lifted = service.seal("u1", "said in another turn", at=sealing.field_at("MessagePosted", "content", E1))
    forged = MessagePosted(event_id=E2, conversation_id=CID, user_id="u1", message_id=M1, content=lifted, client_message_id="c")
    genuine = MessagePosted(event_id=E1, conversation_id=CID, user_id="u1", message_id=M1, content=lifted, client_message_id="c")
    # The records as a forger writes them, the lifted value in place: the codec itself seals every value it
    # encodes (an envelope-shaped text included), so they are encoded here with no key service installed.
    data, original = codec.encode(forged), codec.encode(genuine)
    sealing.install(service)
    try:
        with pytest.raises(codec.InvalidEvent):
            codec.decode(data)
        assert codec.decode(original).content == "said in another turn"  # type: ignore[attr-defined]
        assert codec.decode(codec.encode(forged)).content == lifted  # encoded by Parley: its text, as written
    finally:
        sealing.install(None)


def test_an_original_opens_only_as_its_own_document(service: KeyService) -> None:
    sealed = service.seal_bytes("u1", b"%PDF-1.7 the original", at=original_at(M1))
    assert service.open_bytes(sealed, at=original_at(M1)) == b"%PDF-1.7 the original"
    with pytest.raises(sealing.Unopenable):
        service.open_bytes(sealed, at=original_at(M2))  # copied over another document of the same owner


def test_the_audit_takes_a_first_format_cell_for_the_text_it_holds(service: KeyService, table: Table, kms: LocalKms) -> None:
    """A row projected before places holds first-format cells; the log's projection now seals the same text
    in the current format. ``parley audit`` compares such cells by their text, and still tells other text."""
    from tests.unit.streams.test_tree import U, conversation_log
    from tests.unit.tools.test_audit import materialized
    from tools.audit import audit

    sealing.install(service)
    try:
        log, _ = conversation_log()
        tables = materialized(log)
        raw = _raw_key(table, kms, U)
        posted = next(e for e in log if isinstance(e, MessagePosted))
        (row,) = [r for r in tables["messages"] if str(r["message_id"]) == posted.message_id]
        row["content"] = _first_format(raw, U, posted.content)
        assert audit(log, tables).ok()
        row["content"] = _first_format(raw, U, "other text")
        assert [(d.column, d.key[1][-1]) for d in audit(log, tables).differing] == [("content", posted.message_id)]
    finally:
        sealing.install(None)


def test_during_an_upgrade_format_1_is_written_as_the_release_before_wrote_it(table: Table, kms: LocalKms) -> None:
    """PARLEY_SEAL_FORMAT=1 while processes that read only the first format still run (a rolling upgrade):
    the cells a replay rewrites are the very bytes that release wrote, and every process of this one opens
    them; then format 2 everywhere."""
    import hashlib
    import hmac

    old, new = (KeyService(lambda: table, kms, "ks", seal_format=f) for f in (1, 2))  # type: ignore[arg-type]
    try:
        at = sealing.cell_at("messages", "content", M1)
        value = old.seal("u1", "the text", at=at, deterministic=True)
        raw = _raw_key(table, kms, "u1")
        nonce = hmac.new(hmac.new(raw, b"parley nonce key", hashlib.sha256).digest(), b"the text", hashlib.sha256).digest()[:12]
        body = base64.urlsafe_b64encode(nonce + AESGCM(raw).encrypt(nonce, b"the text", b"u1:1")).decode().rstrip("=")
        assert value == f"{sealing.LEGACY_PREFIX}u1:1:{body}"
        assert new.open(value, at=at) == old.open(new.seal("u1", "the text", at=at), at=at) == "the text"
        assert new.open_bytes(old.seal_bytes("u1", b"%PDF", at=original_at(M1)), at=original_at(M1)) == b"%PDF"
        with pytest.raises(ValueError, match="PARLEY_SEAL_FORMAT"):
            KeyService(lambda: table, kms, "ks", seal_format=3)  # type: ignore[arg-type]
    finally:
        old.close()
        new.close()
