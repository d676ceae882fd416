"""Checkpoints of streaming replies without Kafka: accumulation, pacing, attempts, duplicates,
restarts, bounded memory, and timestamps that always lose to the completion."""

from __future__ import annotations

from schemas import sealing

import uuid
from dataclasses import replace

import pytest

from schemas import events as ev
from streams.checkpoint import Checkpoint, Checkpointer, StoredReply
from streams.projection import cql, to_time
from tests.unit.streams.test_projection import rows, run, store
from tests.unit.streams.test_tree import CID

T0 = 1_700_000_000_000_000


class Reply:
    """A worker's chunks of one reply: text deltas at increasing event times."""

    def __init__(self, request_id: str | None = None, attempt: int = 0, start_chars: int = 0) -> None:
        self.request_id = request_id or str(uuid.uuid4())
        self.attempt = attempt
        self.seq = 0
        self.chars = start_chars
        self.t = T0 + 1_000_000 * attempt

    def chunk(self, text: str, tokens: int = 1) -> ev.TokenChunk:
        self.t += 10_000
        c = ev.TokenChunk(
            conversation_id=CID, user_id="u", request_id=self.request_id, attempt=self.attempt,
            seq=self.seq, text=text, tokens=tokens, offset_chars=self.chars, occurred_at=self.t,
        )
        self.seq += 1
        self.chars += len(text)
        return c

    def final(self, reason: str = "stop") -> ev.TokenChunk:
        return replace(self.chunk("", 0), finish_reason=reason)

    def completed(self, content: str, reason: str = "stop", parent: str = "") -> ev.GenerationCompleted:
        # The worker stamps it after every text chunk was acknowledged, before the final chunk.
        self.t += 10_000
        return ev.GenerationCompleted(
            conversation_id=CID, user_id="u", request_id=self.request_id, parent_id=parent or str(uuid.uuid4()),
            attempt=self.attempt, finish_reason=reason, content=content, occurred_at=self.t,
        )


def cp(min_s: float = 1.0, live: int = 100, finished: int = 100) -> Checkpointer:
    return Checkpointer(min_s, live, finished)


def test_first_text_is_written_at_once_then_at_most_every_min_interval() -> None:
    c, r = cp(), Reply()
    first = c.take(r.chunk("Hel", 2), now=0.0)
    assert first is not None and (first.content, first.tokens) == ("Hel", 2)
    assert c.take(r.chunk("lo"), now=0.3) is None and c.take(r.chunk(" wo"), now=0.6) is None
    assert c.due(0.9) == []  # held: the last write was under a second ago
    [due] = c.due(1.0)
    assert (due.content, due.tokens) == ("Hello wo", 4)
    assert c.due(1.5) == []  # nothing new since
    second = c.take(r.chunk("rld"), now=2.2)  # a chunk after the interval writes at once
    assert second is not None and second.content == "Hello world"
    assert c.due(100.0) == []


def test_timestamp_is_the_newest_chunks_minus_one_and_below_the_completion() -> None:
    c, r = cp(min_s=0.0), Reply()
    a = c.take(r.chunk("ab"), 0.0)
    b = r.chunk("cd")
    late = c.take(b, 0.1)
    done = r.completed("abcd")
    assert a is not None and late is not None
    assert late.timestamp == b.occurred_at - 1 < done.occurred_at
    assert a.timestamp < late.timestamp  # later checkpoints of one reply win over earlier ones


def test_a_checkpoint_processed_after_the_completion_never_regresses_the_row() -> None:
    """Any order of the completion's and the checkpoints' writes gives the completion's row."""
    r = Reply()
    user = str(uuid.uuid4())
    asked = ev.GenerationRequested(conversation_id=CID, user_id="u", request_id=r.request_id, parent_id=user,
                                   client_message_id="c", occurred_at=T0)
    c = cp(min_s=0.0)
    chunks = [r.chunk("partial "), r.chunk("text")]
    done = r.completed("partial text and the rest", parent=user)  # more text than the chunks seen so far
    writes, _ = run([asked, done])
    taken = [c.take(x, 0.0) for x in chunks]
    checkpoints = [t.write(sealing.sealer()) for t in taken if t is not None]
    assert len(checkpoints) == 2
    final = rows(store(writes), "messages")
    for order in (writes + checkpoints, checkpoints + writes, checkpoints[::-1] + writes[::-1]):
        assert rows(store(order), "messages") == final
    [row] = final.values()
    assert (row["content"], row["status"], row["role"]) == ("partial text and the rest", "complete", "assistant")


def test_a_cancelled_reply_keeps_its_partial_text_whatever_the_checkpoints_did() -> None:
    r, c = Reply(), cp(min_s=0.0)
    cps = [c.take(r.chunk(t), 0.0) for t in ("half ", "an ")]
    done = r.completed("half an ", reason="cancelled")
    writes, state = run([done])
    [row] = rows(store([x.write(sealing.sealer()) for x in cps if x] + writes), "messages").values()
    assert (row["content"], row["status"], row["finish_reason"]) == ("half an ", "cancelled", "cancelled")
    assert state.messages[r.request_id].status == "cancelled"


def test_checkpoint_alone_writes_role_content_tokens_never_status() -> None:
    r = Reply()
    w = cp().take(r.chunk("x", 3), 0.0)
    assert w is not None
    write = w.write(sealing.sealer())
    assert dict(write.cells) == {"role": "assistant", "content": "x", "tokens": 3, "updated_at": to_time(w.timestamp)}
    assert cql(write.shape).startswith("UPDATE messages USING TIMESTAMP ? SET role = ?, content = ?, tokens = ?")
    # A checkpoint before the GenerationRequested row: the request's write completes the row.
    asked = ev.GenerationRequested(conversation_id=CID, user_id="u", request_id=r.request_id, parent_id=str(uuid.uuid4()),
                                   client_message_id="c", occurred_at=T0)
    [row] = rows(store([write] + run([asked])[0]), "messages").values()
    assert (row["role"], row["status"], row["content"]) == ("assistant", "streaming", "x")


def test_duplicates_are_ignored_and_a_gap_stops_checkpoints_until_the_end() -> None:
    c, r = cp(min_s=0.0), Reply()
    a, b = r.chunk("one "), r.chunk("two ")
    assert c.take(a, 0.0) is not None and c.take(b, 0.0) is not None
    assert c.take(a, 1.0) is None and c.take(b, 1.0) is None and c.due(5.0, force=True) == []
    r.chunk("lost ")  # never delivered
    assert c.take(r.chunk("four"), 2.0) is None  # continuing would write text with a hole in it
    assert c.due(9.0, force=True) == []


def test_a_higher_attempt_supersedes_and_resumes_from_its_offset() -> None:
    c, r0 = cp(min_s=0.0), Reply()
    c.take(r0.chunk("The cat ", 2), 0.0)
    c.take(r0.chunk("sat on", 2), 0.0)
    r1 = Reply(r0.request_id, attempt=1, start_chars=len("The cat "))  # resumed from the first chunk's text
    resumed = c.take(r1.chunk("slept", 1), 1.0)
    assert resumed is not None and (resumed.content, resumed.tokens) == ("The cat slept", 3)
    assert c.take(r0.chunk(" the mat"), 2.0) is None  # the superseded attempt keeps talking: ignored
    again = c.take(r1.chunk("."), 3.0)
    assert again is not None and again.content == "The cat slept."
    restarted = c.take(Reply(r0.request_id, attempt=2).chunk("New"), 4.0)  # from scratch
    assert restarted is not None and restarted.content == "New" and restarted.timestamp > again.timestamp


def test_a_final_chunk_forgets_the_reply_and_later_chunks_of_it_are_ignored() -> None:
    c, r = cp(min_s=10.0), Reply()
    c.take(r.chunk("a"), 0.0)
    c.take(r.chunk("b"), 0.1)  # pending
    assert c.take(r.final(), 0.2) is None  # the completion carries the whole text
    assert len(c) == 0 and c.due(99.0, force=True) == []
    zombie = Reply(r.request_id, attempt=0)
    assert c.take(zombie.chunk("late"), 1.0) is None and len(c) == 0


def test_memory_is_bounded() -> None:
    c = cp(min_s=0.0, live=3, finished=2)
    replies = [Reply() for _ in range(5)]
    for r in replies:
        c.take(r.chunk("x"), 0.0)
    assert len(c) == 3
    for r in replies[2:]:
        c.take(r.final(), 0.0)
    assert len(c) == 0
    # Only the two most recent finished keys are remembered; an older one is followed again.
    assert c.take(Reply(replies[2].request_id).chunk("y"), 0.0) is not None
    assert c.take(Reply(replies[4].request_id).chunk("y"), 0.0) is None


def test_a_restarted_instance_resumes_from_the_stored_row() -> None:
    c, r = cp(min_s=0.0), Reply()
    for t in ("ab", "cd", "ef"):
        r.chunk(t, 1)  # seen by the previous instance, which wrote "abcd" (4 chars, 2 tokens) and then died
    nxt = r.chunk("gh", 1)  # offset 6: "ef" was taken but never written
    assert c.needs_prefix(nxt)
    c.seed(nxt, StoredReply("abcd", 2, "streaming"))
    assert c.take(nxt, 0.0) is None  # a hole: "ef" is nowhere

    c, r = cp(min_s=0.0), Reply()
    for t in ("ab", "cd"):
        r.chunk(t, 1)
    nxt = r.chunk("ef", 1)
    c.seed(nxt, StoredReply("abcd", 2, "streaming"))
    out = c.take(nxt, 0.0)
    assert out is not None and (out.content, out.tokens) == ("abcdef", 3)
    assert not c.needs_prefix(r.chunk("gh"))

    c, r = cp(min_s=0.0), Reply()
    r.chunk("ab")
    nxt = r.chunk("cd")
    c.seed(nxt, StoredReply("ab and the rest", 4, "complete"))  # it already ended: leave the row alone
    assert c.take(nxt, 0.0) is None and not c.needs_prefix(r.chunk("ef"))


def test_a_prefix_of_a_longer_row_keeps_a_prorated_token_count() -> None:
    c, r = cp(min_s=0.0), Reply()
    r.chunk("abcd")
    nxt = r.chunk("XY")
    c.seed(nxt, StoredReply("abcdefgh", 8, "streaming"))  # written past the redelivered chunk
    out = c.take(nxt, 0.0)
    assert out is not None and (out.content, out.tokens) == ("abcdXY", 5)


def test_malformed_ids_raise_at_the_chunk() -> None:
    bad = ev.TokenChunk(conversation_id="nope", user_id="u", request_id=str(uuid.uuid4()), seq=0, text="x")
    with pytest.raises(ValueError):
        cp().take(bad, 0.0)
    with pytest.raises(ValueError):
        Checkpointer(1.0, 0, 1)


def test_checkpoint_write_is_keyed_by_the_reply() -> None:
    rid = str(uuid.uuid4())
    w = Checkpoint(CID, rid, "t", 1, 5).write(sealing.sealer())
    assert (w.table, dict(w.key), w.timestamp) == ("messages", {"conversation_id": uuid.UUID(CID), "message_id": uuid.UUID(rid)}, 5)
