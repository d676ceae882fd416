"""Sealed fields: the codec seals every content field of an event and opens it again (schemas/sealing.py).

A stand-in key service (reversible, no cryptography) shows *which* fields are sealed and that every
reader opens them; the real AES-GCM service is tested against Cassandra (tests/integration/test_keys.py).
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import replace
from collections.abc import Iterator

import pytest

from gateway import chunk_reader
from schemas import codec, sealing
from schemas.events import (
    EVENT_TYPES,
    Citation,
    GenerationCompleted,
    GenerationRequested,
    InferenceRequested,
    MemoryFact,
    MemoryUpdated,
    MessagePosted,
    Passage,
    PromptMessage,
    Retrieval,
    TokenChunk,
    ToolCall,
    ToolFunction,
    Tools,
)
from tools.analysts.records import Decoder

CID = "00000000-0000-0000-0000-0000000000c1"
MID = "00000000-0000-0000-0000-0000000000a1"


class Reversible:
    """Seals by base64 of the place and the reversed text: what it seals is unreadable in the bytes, and
    opens again only at the place it was sealed for (as parley/keys.py's associated data), until its
    owner is put in ``erased``."""

    def __init__(self) -> None:
        self.prefetched: list[tuple[list[str], bool]] = []
        self.erased: set[str] = set()

    def seal(self, user_id: str, text: str, *, at: str, deterministic: bool = False) -> str:
        return f"{sealing.PREFIX}{user_id}:1:" + base64.b64encode(f"{at}\x00{text[::-1]}".encode()).decode()

    def open(self, value: str, *, at: str) -> str:
        if sealing.owner_of(value) in self.erased:
            return sealing.ERASED
        sealed_at, text = base64.b64decode(value.rsplit(":", 1)[1]).decode().split("\x00", 1)
        if sealed_at != at:
            raise sealing.Unopenable(f"sealed for {sealed_at}, opened at {at}")
        return text[::-1]

    def blind(self, user_id: str, term: str) -> str:
        return "b:" + term[::-1]

    async def prefetch(self, user_ids: object, *, create: bool = False) -> None:
        self.prefetched.append((sorted(user_ids), create))  # type: ignore[call-overload]


def wire(event: object) -> bytes:
    """``event``'s bytes with its values as they are, already sealed ones included: what another producer could
    have written (the codec seals every value it encodes, so it never writes these itself)."""
    service = sealing.installed()
    sealing.install(None)
    try:
        return codec.encode(event)  # type: ignore[arg-type]
    finally:
        sealing.install(service)


@pytest.fixture
def keys() -> Iterator[Reversible]:
    service = Reversible()
    sealing.install(service)
    yield service
    sealing.install(None)


def test_every_event_that_holds_content_names_its_owner() -> None:
    """A sealed field is sealed under the event's user_id: an event type without one could not be sealed."""
    holding = [cls for cls in EVENT_TYPES.values() if sealing.holds_sealed(cls)]
    assert len(holding) >= 10
    for cls in holding:
        assert "user_id" in {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_content_fields_are_sealed_on_the_wire_and_opened_on_decode(keys: Reversible) -> None:
    events = [
        MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="canary in a message", client_message_id="c"),
        GenerationCompleted(
            conversation_id=CID, user_id="u1", request_id=MID, parent_id=MID, finish_reason="stop", content="canary in a reply",
            citations=[Citation(number=1, document_id=CID, page=1, chunk_id=MID, text="canary quoted", filename="canary.pdf")],
            retrieval=Retrieval(path="hybrid", note="canary note"),
        ),  # fmt: skip
        InferenceRequested(
            conversation_id=CID, user_id="u1", request_id=MID, parent_id=MID, resume_text="canary resumed",
            messages=[PromptMessage(role="user", content="canary in a prompt")],
            retrieval=Retrieval(
                path="hybrid",
                passages=[Passage(label="[canary.pdf p.1]", document_id=CID, chunk_id=MID, page=1, text="canary passage")],
            ),
        ),  # fmt: skip
        MemoryUpdated(user_id="u1", facts=[MemoryFact(fact_id=MID, text="canary fact")]),
        TokenChunk(conversation_id=CID, user_id="u1", request_id=MID, seq=0, text="canary chunk", documents_note="canary"),
        # A tool conversation: the functions' descriptions and schemas, and every call's arguments.
        GenerationRequested(
            conversation_id=CID, user_id="u1", request_id=MID, parent_id=MID, client_message_id="c",
            tools=Tools(functions=[ToolFunction(name="f", description="canary tool", parameters='{"description": "canary"}')]),
        ),  # fmt: skip
        MessagePosted(
            conversation_id=CID, user_id="u1", message_id=MID, content="", client_message_id="c", role="assistant",
            tool_calls=[ToolCall(id="call_1", name="f", arguments='{"q": "canary"}')],
        ),  # fmt: skip
        TokenChunk(conversation_id=CID, user_id="u1", request_id=MID, seq=0, tool_calls=[ToolCall(id="c", name="f", arguments='"canary"')]),
    ]
    for event in events:
        data = codec.encode(event)
        assert b"canary" not in data, type(event).__name__
        assert codec.decode(data) == event


def test_without_a_key_service_nothing_is_sealed_and_sealed_bytes_are_refused(keys: Reversible) -> None:
    event = MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="hello", client_message_id="c")
    sealed = codec.encode(event)
    sealing.install(None)
    assert b"hello" in codec.encode(event)
    with pytest.raises(sealing.SealedWithoutKeys):
        codec.decode(sealed)


def test_text_shaped_like_a_sealed_value_is_sealed_and_comes_back_as_written(keys: Reversible) -> None:
    """A model's reply or a tool's result may begin like an envelope (a NUL, ``s2:``, someone's id): the gateway
    refuses NUL in what a client sends, but a model and a tool are not the gateway's. Kept as it was, it would be
    opened as a sealed value on every read: Unopenable (the record dead-lettered, the turn lost) or, for an
    envelope forged at the right place, another value. Sealed like any text, it reads back as written."""
    from streams.projection import Write, sealed

    forged = f"{sealing.PREFIX}victim:1:" + base64.b64encode(b"x").decode()
    for text in (forged, sealing.LEGACY_PREFIX, sealing.PREFIX + "garbage"):
        reply = GenerationCompleted(conversation_id=CID, user_id="u1", request_id=MID, parent_id=MID, finish_reason="stop", content=text)
        assert codec.decode(codec.encode(reply)).content == text
        write = Write("messages", (("conversation_id", CID), ("message_id", MID)), (("content", text),), 1)
        cell = dict(sealed(write, "u1", sealing.sealer()).cells)["content"]
        assert sealing.owner_of(cell) == "u1"
        assert sealing.open_text(cell, at=sealing.cell_at("messages", "content", MID)) == text


def test_the_gateway_s_chunk_reader_and_the_analysts_decoder_open_what_the_codec_opens(keys: Reversible) -> None:
    chunk = TokenChunk(
        conversation_id=CID, user_id="u1", request_id=MID, seq=1, text="secret words", documents_note="a note", finish_reason="stop",
        citations=[Citation(number=1, document_id=CID, page=2, chunk_id=MID, text="a span", filename="f.pdf")],
        tool_calls=[ToolCall(id="call_1", name="f", arguments='{"q": "x"}'), ToolCall(id="call_2", name="g", arguments="{}")],
    )  # fmt: skip
    data = codec.encode(chunk)
    assert chunk_reader.read(data, {MID}) == codec.decode(data) == chunk
    name, record = Decoder(["TokenChunk"])(data)  # type: ignore[misc]
    assert record["text"] == "secret words" and record["citations"][0]["filename"] == "f.pdf"


def test_a_projected_cell_is_sealed_deterministically(keys: Reversible) -> None:
    from streams.projection import sealed
    from streams.projection import Write

    write = Write("messages", (("conversation_id", CID), ("message_id", MID)), (("content", "text"), ("role", "user")), 1)
    out = sealed(write, "u1", sealing.sealer())
    assert dict(out.cells)["role"] == "user" and sealing.is_sealed(dict(out.cells)["content"])
    assert sealing.open_text(dict(out.cells)["content"], at=sealing.cell_at("messages", "content", MID)) == "text"


async def test_the_async_codec_asks_for_the_keys_it_needs_before_the_synchronous_step(keys: Reversible) -> None:
    """On an event loop the keys are fetched first (off the loop, by the service): the owners its sealed
    values name and its user for decode; the owner, to be made if new, for encode; none for an event
    that holds no content."""
    event = MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="hello", client_message_id="c")
    data = await codec.encode_async(event)
    assert keys.prefetched == [(["u1"], True)]
    quoted = keys.seal("u3", "quoted", at=sealing.field_at("GenerationCompleted", "content", MID))
    other = GenerationCompleted(
        event_id=MID, conversation_id=CID, user_id="u2", request_id=MID, parent_id=MID, finish_reason="stop", content=quoted
    )  # a value sealed under another owner, for this very field
    keys.prefetched.clear()
    assert await codec.decode_async(data) == event
    assert await codec.decode_async(wire(other)) == replace(other, content="quoted")
    assert keys.prefetched == [(["u1"], False), (["u2", "u3"], False)]
    keys.prefetched.clear()
    from schemas.events import ConversationDeleted

    gone = ConversationDeleted(conversation_id=CID, user_id="u1")
    assert not sealing.holds_sealed(ConversationDeleted)
    await codec.encode_async(gone)
    assert keys.prefetched == []


class OtherKey(Reversible):
    def blind(self, user_id: str, term: str) -> str:
        return "b:" + term.upper()


def test_ids_derived_from_content_are_keyed_by_the_owners_key(keys: Reversible) -> None:
    """Memory fact ids, OpenAI message keys, a document's content hash: kept for good (user.memory,
    chat.events, docs.events), so a guess of the text plus the user id must not reproduce them once the
    key is gone (review H8)."""
    import hashlib

    from gateway.documents import content_hash
    from gateway.openai_request import ChatMessage, message_keys
    from streams.memory import fact

    history = (ChatMessage("user", "I live in Lisbon"),)
    pdf = b"%PDF-1.7 a known file"

    def derived() -> tuple[str, list[str], str]:
        sealer = sealing.sealer()
        return fact("u1", "I live in Lisbon", sealer).fact_id, message_keys("u1", history), content_hash("u1", pdf, sealer)

    mine = derived()
    assert mine == derived()  # stable under one key
    assert hashlib.sha256(pdf).hexdigest() not in mine[2]
    sealing.install(None)  # what a guesser without the key computes
    assert all(a != b for a, b in zip(derived(), mine))
    sealing.install(OtherKey())  # another key: other ids
    assert all(a != b for a, b in zip(derived(), mine))


class _Row:
    """A row as the driver hands it back: the written key and cells as attributes, None for the rest."""

    def __init__(self, **cells: object) -> None:
        vars(self).update(cells)

    def __getattr__(self, name: str) -> None:
        return None


def test_every_reader_opens_a_cell_at_the_place_its_writer_sealed_it_for(keys: Reversible) -> None:
    """The stand-in refuses a value opened at another place than it was sealed for, as AES-GCM does: so
    each writer of a sealed cell (the projection, checkpoints, memory, document statuses) and each reader of
    it (the gateway's store, the processors' store, summaries) name the same cell and row."""
    import uuid

    from gateway.store import _document, _message
    from schemas.events import ConversationCreated, ConversationRenamed, DocumentUploaded, SummaryWritten
    from streams import document_status, memory, tree
    from streams.projection import writes_for
    from streams.store import state_from_rows
    from streams.summary_store import summaries_from_rows

    sealer = sealing.sealer()
    events = [
        ConversationCreated(conversation_id=CID, user_id="u1", title="first title", model="small"),
        MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="the question", client_message_id="c"),
        ConversationRenamed(conversation_id=CID, user_id="u1", title="a title"),
        SummaryWritten(
            conversation_id=CID, user_id="u1", summary_id="s1", through_message_id=MID, covered_message_ids=[MID], content="a summary"
        ),
    ]
    rows: dict[tuple[str, tuple[object, ...]], dict[str, object]] = {}
    state = tree.empty(CID)
    for event in events:
        for write in writes_for(state, event, sealer):
            rows.setdefault((write.table, tuple(v for _, v in write.key)), dict(write.key)).update(write.cells)
        state = tree.apply(state, event)
    (conversation,) = [_Row(**r) for (t, _), r in rows.items() if t == "conversations"]
    (message,) = [_Row(**r) for (t, _), r in rows.items() if t == "messages"]
    (summary,) = [_Row(**r) for (t, _), r in rows.items() if t == "summaries"]
    assert sealing.is_sealed(message.content) and sealing.is_sealed(conversation.title)  # type: ignore[attr-defined]
    loaded = state_from_rows(CID, conversation, [message])
    assert (loaded.title, loaded.messages[MID].content) == ("a title", "the question")
    assert _message(message).content == "the question"
    assert [s.content for s in summaries_from_rows([summary])] == ["a summary"]

    upload = DocumentUploaded(document_id=MID, user_id="u1", filename="report.pdf", media_type="application/pdf", size_bytes=1,
                              sha256="", storage_uri="file:///x")  # fmt: skip
    (status,) = document_status.statements_for(upload, sealer)
    cells = dict(zip(status.cql.split("SET ")[1].split(" WHERE")[0].replace(" = ?", "").split(", "), status.values[1:]))
    assert _document(_Row(**cells, document_id=uuid.UUID(MID), user_id="u1")).filename == "report.pdf"

    facts = memory.writes_for(MemoryUpdated(user_id="u1", facts=[memory.fact("u1", "I live in Lisbon", sealer)]), sealer)
    _, fact_id, text, *_ = facts[1].values
    assert sealing.open_text(text, at=sealing.cell_at("user_memory", "text", fact_id)) == "I live in Lisbon"
    with pytest.raises(sealing.Unopenable):  # the same text, read as another cell: refused
        sealing.open_text(message.content, at=sealing.cell_at("messages", "content", uuid.uuid4()))  # type: ignore[attr-defined]


def test_every_decoder_refuses_a_value_sealed_for_another_event(keys: Reversible) -> None:
    """The codec, the gateway's chunk reader and the analysts' decoder name the same place for a sealed
    field, so each refuses a value lifted from another event as bad input (never its text, never a crash)."""
    other = "00000000-0000-0000-0000-0000000000e9"
    lifted = keys.seal("u1", "said elsewhere", at=sealing.field_at("TokenChunk", "text", other))
    forged = wire(TokenChunk(conversation_id=CID, user_id="u1", request_id=MID, seq=0, text=lifted))
    with pytest.raises(codec.InvalidEvent):
        codec.decode(forged)
    with pytest.raises(codec.InvalidEvent):
        chunk_reader.read(forged, {MID})
    with pytest.raises(codec.InvalidEvent):
        Decoder(["TokenChunk"])(forged)
    genuine = wire(TokenChunk(event_id=other, conversation_id=CID, user_id="u1", request_id=MID, seq=0, text=lifted))
    assert chunk_reader.read(genuine, {MID}).text == codec.decode(genuine).text == "said elsewhere"  # type: ignore[union-attr]
