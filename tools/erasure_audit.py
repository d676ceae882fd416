"""``parley audit erasure``: is an erased user really gone, and is a canary text anywhere on disk? (DESIGN.md §12)

Two kinds of proof, each able to fail:

- **The user** (``audit_user``): their newest erasure job is done (``erasures``), their data
  key is destroyed (only the erasure's mark is left in ``data_keys``), their rows are gone from every read path (conversations deleted
  and blanked, documents deleted, no memory, every API key revoked, no search term left in the user's
  search partitions), and no event of theirs
  on any topic holding content opens to readable text: every sealed field reads "[erased]".
  That includes the dead letters of their records (``*.dlq``, kept 30 days): the error's words
  sealed in ``detail``, and the original record's content fields; a letter written before
  errors were sealed (its text in the clear, no owner named) is found by its record's owner.
  Their documents' postings are looked for by a scan of ``document_postings`` per document
  (the table is partitioned by document and term): cheap on a dev box, a full read in production.
- **A canary** (``scan_canaries``): the bytes of everything under the data dir (Kafka's log
  segments decompressed, Cassandra's SSTables after a flush and its commit log, archives,
  replay outputs; ``tools/erasure_scan.py``) are searched for the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cassandra.cluster import Session

from documents.index import POSTINGS_SCAN
from parley.settings import KafkaSettings
from schemas import catalog, codec, sealing
from schemas import events as ev
from streams.erasure import Progress
from streams.erasure_rows import COLUMNS, progress_of
from streams.search_index import BUCKETS as SEARCH_BUCKETS
from streams.search_index import TABLES as SEARCH_TABLES
from tools.audit_sources import read_log


#: How long the scan for one erased document's postings may take (it reads every partition of the table).
POSTINGS_SCAN_S = 300.0


@dataclass(frozen=True)
class Problem:
    where: str  # "cassandra users", "kafka chat.events", "file .data/…"
    what: str  # never the text found


def content_topics() -> list[str]:
    """Every topic whose events hold sealed fields (the DLQs among them: a dead letter's ``detail``)."""
    return [t.name for t in catalog.TOPICS.values() if any(sealing.holds_sealed(e) for e in t.events)]


def _readable(event: ev.Event) -> int:
    return sum(1 for v in sealing.sealed_values(event) if v and v != sealing.ERASED)


def dead_letter_problems(letter: ev.DeadLetter, user_id: str) -> int:
    """How much of what ``letter`` keeps about ``user_id``'s record still reads as text: its detail, its
    error text when it predates sealed details (no owner named, yet the record is the user's), and the
    original record's content fields written in the clear (sealed ones go with the key, checked apart)."""
    owner = letter.user_id or codec.owner(letter.raw_value)
    if owner != user_id:
        return 0
    found = _readable(letter) + (1 if not letter.user_id and letter.error else 0)
    try:
        cls, record = codec.unopened(letter.raw_value)
    except codec.CodecError:
        return found
    return found + sealing.unsealed(cls, record)


def _opens(value: str, at: str) -> bool:
    """Whether a cell reads as text: plain, or sealed under a key that still exists (one sealed for another
    place does not open, but its key is alive all the same)."""
    try:
        return sealing.open_text(value, at=at) != sealing.ERASED
    except sealing.Unopenable:
        return True


def erasure_job(session: Session, keyspace: str, user_id: str) -> Progress | None:
    """The user's newest erasure request and how far its job got (streams/erasure.py)."""
    row = session.execute(f"SELECT {COLUMNS} FROM {keyspace}.erasures WHERE user_id = %s LIMIT 1", (user_id,)).one()
    return progress_of(row) if row is not None else None


def search_problems(session: Session, keyspace: str, user_id: str) -> list[Problem]:
    """The user's search index: its fixed set of partitions (streams/search_index.py) hold no term. A deleted
    conversation's mark (ids only, no term) may be written by the search processor after the purge."""
    out = []
    for table in SEARCH_TABLES:
        terms = 0
        for b in range(SEARCH_BUCKETS):
            rows = session.execute(f"SELECT * FROM {keyspace}.{table} WHERE user_id = %s AND bucket = %s", (user_id, b))
            terms += sum(1 for r in rows if getattr(r, "terms", None) or table != "search_messages")
        if terms:
            out.append(Problem(f"cassandra {table}", f"{terms} search rows of the user remain"))
    return out


def audit_user(kafka: KafkaSettings, session: Session, keyspace: str, keys_keyspace: str, user_id: str) -> list[Problem]:
    out: list[Problem] = []
    job = erasure_job(session, keyspace, user_id)
    if job is None:
        out.append(Problem("cassandra erasures", "no erasure was requested for the user"))
    elif job.done_at is None:
        out.append(Problem("cassandra erasures", f"the erasure job has not finished (status: {job.status})"))
    keys = session.execute(f"SELECT version, wrapped, kek_id FROM {keys_keyspace}.data_keys WHERE user_id = %s", (user_id,)).all()
    if any(k.wrapped is not None for k in keys):
        out.append(Problem("cassandra data_keys", "the user's data key still exists"))
    if not any(k.version == 0 and k.kek_id == "erased" for k in keys):
        out.append(Problem("cassandra data_keys", "no erasure is recorded for the user"))
    user = session.execute(f"SELECT erased_at, name FROM {keyspace}.users WHERE user_id = %s", (user_id,)).one()
    if user is None or user.erased_at is None or user.name:
        out.append(Problem("cassandra users", "the user is not marked erased (or keeps a name)"))
    listed = session.execute(
        f"SELECT conversation_id, deleted, title FROM {keyspace}.conversations_by_user WHERE user_id = %s", (user_id,)
    ).all()
    for row in listed:
        if not row.deleted:
            out.append(Problem("cassandra conversations_by_user", f"conversation {row.conversation_id} is not deleted"))
        cells = [(row.title, sealing.cell_at("conversations_by_user", "title", row.conversation_id))] + [
            (getattr(r, column), sealing.cell_at("messages", column, r.message_id)) for r in session.execute(
                f"SELECT message_id, content, feedback_reason FROM {keyspace}.messages WHERE conversation_id = %s", (row.conversation_id,))
            for column in ("content", "feedback_reason")
        ] + [
            (r.content, sealing.cell_at("summaries", "content", r.summary_id)) for r in session.execute(
                f"SELECT summary_id, content FROM {keyspace}.summaries WHERE conversation_id = %s", (row.conversation_id,))
        ]  # fmt: skip
        readable = [t for t, at in cells if t and _opens(t, at)]
        if readable:
            out.append(Problem("cassandra messages", f"conversation {row.conversation_id}: {len(readable)} cells readable"))
    documents = session.execute(f"SELECT document_id, status FROM {keyspace}.documents WHERE user_id = %s", (user_id,)).all()
    out += [Problem("cassandra documents", f"document {d.document_id} is {d.status}") for d in documents if d.status != "deleted"]
    postings = session.prepare(POSTINGS_SCAN.format(ks=keyspace)) if documents else None
    for d in documents:  # the index: pages, chunks (text sealed, but embeddings are not) and postings purged
        for table in ("document_pages", "document_chunks"):
            if session.execute(f"SELECT document_id FROM {keyspace}.{table} WHERE document_id = %s LIMIT 1", (d.document_id,)).one():
                out.append(Problem(f"cassandra {table}", f"document {d.document_id} still has rows"))
        # Postings are partitioned by (document, term): finding a document's is a scan of the table.
        if session.execute(postings, (d.document_id,), timeout=POSTINGS_SCAN_S).one():
            out.append(Problem("cassandra document_postings", f"document {d.document_id} still has postings"))
    out += search_problems(session, keyspace, user_id)
    if session.execute(f"SELECT position FROM {keyspace}.user_memory WHERE user_id = %s", (user_id,)).all():
        out.append(Problem("cassandra user_memory", "memory facts remain"))
    for key in session.execute(f"SELECT key_hash FROM {keyspace}.keys_by_user WHERE user_id = %s", (user_id,)):
        live = session.execute(f"SELECT revoked FROM {keyspace}.api_keys WHERE key_hash = %s", (key.key_hash,)).one()
        if live is not None and not live.revoked:
            out.append(Problem("cassandra api_keys", "an API key of the user still works"))
    for topic in content_topics():
        events, _ = read_log(kafka, topic)
        if topic.endswith(".dlq"):
            readable = sum(dead_letter_problems(e, user_id) for e in events if isinstance(e, ev.DeadLetter))
            if readable:
                out.append(Problem(f"kafka {topic}", f"{readable} texts about the user's records in dead letters are readable"))
            continue
        readable = sum(_readable(e) for e in events if getattr(e, "user_id", None) == user_id)
        if readable:
            out.append(Problem(f"kafka {topic}", f"{readable} content fields of the user's events are readable"))
    return out


def scan_canaries(data_dir: Path, canaries: Sequence[str]) -> tuple[list[Problem], dict[str, int]]:
    """Problems for each canary found on disk, and how many files of each store were read."""
    from tools.erasure_scan import VANISHED, scan

    report = scan(data_dir, [c.encode() for c in canaries])
    problems = [Problem(f"{f.store} {f.path}", f"canary {f.needle + 1} found at {f.where}") for f in report.findings]
    # A file the scan could not read is not proof of absence: it fails the audit too (one deleted
    # meanwhile, by Kafka's retention or Cassandra's compaction, is gone from the disk: not a problem).
    problems += [
        Problem(f"file {path}", f"could not be scanned: {why}") for path, why in report.unscannable if why != VANISHED
    ]
    return problems, report.scanned
