"""The built-in tools over the calling user's own data (DESIGN.md §13): ``search_documents``, ``remember``
and ``forget`` (parley/tool_registry.py declares them; the executor runs them, workers/tool_executor.py).

Pure cores over two small interfaces (the user's documents, their current memory) that
streams/tool_executor.py fills from Cassandra and the ``user.memory`` log. The user is the cleared call's
``user_id``: a model can name no other. A memory change is never written here: the runner returns the new
snapshot (``MemoryUpdated``) and the executor commits it in the transaction of the call's ToolCallFinished,
so it takes effect exactly when the call is seen finished. Nothing of a query, a fact or a passage is
logged: outcomes and error types only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from parley.errors import Unavailable
from parley.ids import NS
from schemas import sealing
from schemas.events import MemoryUpdated
from streams.document_search import DocumentSearch
from streams.memory import MAX_FACT_CHARS, MAX_FACTS, fact
from streams.prompt import documents_text
from workers.tool_runners import NotSent, ToolResult, clipped

MAX_QUERY_CHARS = 500


class Library(Protocol):
    async def document_ids(self, user_id: str) -> list[str]:
        """Ids of the user's documents that may be searched (not deleted), newest first."""
        ...


class Memories(Protocol):
    async def facts(self, user_id: str) -> list[str]:
        """The user's memory as last committed, in prompt order (NotSent-free: raise Unavailable)."""
        ...


def text_argument(arguments: dict[str, Any], name: str, most: int) -> str | ToolResult:
    """``arguments[name]`` stripped, or the error the model is told (the broker checked the schema; a forged
    record or a changed file may still get here)."""
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        return ToolResult("error", "", f"`{name}` must be a non-empty string")
    if len(value) > most:
        return ToolResult("error", "", f"`{name}` must be at most {most} characters")
    return value.strip()


class DocumentsTool:
    """``search_documents {"query"}``: every searchable document of the user, searched as a turn's attached
    documents are (streams/document_search.py), the passages rendered as the prompt renders them."""

    def __init__(self, library: Library, search: DocumentSearch) -> None:
        self._library, self._search = library, search

    async def run_for(self, user_id: str, arguments: dict[str, Any], idempotency_key: str) -> ToolResult:
        query = text_argument(arguments, "query", MAX_QUERY_CHARS)
        if isinstance(query, ToolResult):
            return query
        try:
            document_ids = await self._library.document_ids(user_id)
        except Unavailable as exc:
            raise NotSent(type(exc).__name__) from exc
        if not document_ids:
            return ToolResult("ok", "The user has no documents to search.")
        retrieval = await self._search.search(user_id, document_ids, query)  # fails soft, saying so in its note
        if not retrieval.passages:
            told = retrieval.note or ""
            return ToolResult("ok", "\n".join(filter(None, ["Nothing in the user's documents matched.", told])))
        return ToolResult("ok", clipped(documents_text(retrieval.passages, retrieval.note)))


class MemoryTool:
    """``remember {"fact"}`` / ``forget {"fact"}``: the user's whole memory with the fact added (at the end)
    or taken out (its text matched, ignoring case and surrounding space), as one MemoryUpdated snapshot
    (the same shape the API's PUT /v1/memory writes: gateway/memory.py)."""

    def __init__(self, name: str, memories: Memories, sealer: Callable[[], sealing.Sealer] = sealing.sealer) -> None:
        if name not in ("remember", "forget"):
            raise ValueError(f"no memory tool named {name!r}")
        self._adds = name == "remember"
        self._memories, self._sealer = memories, sealer

    async def run_for(self, user_id: str, arguments: dict[str, Any], idempotency_key: str) -> ToolResult:
        text = text_argument(arguments, "fact", MAX_FACT_CHARS)
        if isinstance(text, ToolResult):
            return text
        try:
            current = await self._memories.facts(user_id)
            await sealing.prefetch([user_id], create=True)  # fact ids are keyed by the owner's key
        except Unavailable as exc:
            raise NotSent(type(exc).__name__) from exc
        texts = changed(current, text, adds=self._adds)
        if isinstance(texts, ToolResult):
            return texts
        sealer = self._sealer()
        event = MemoryUpdated(
            # Derived from the call: a finish committed twice carries one snapshot, which readers drop as a copy.
            event_id=str(uuid.uuid5(NS, f"tool:{idempotency_key}:memory")),
            user_id=user_id,
            facts=[fact(user_id, t, sealer) for t in texts],
        )
        said = "Remembered." if self._adds else "Forgotten."
        return ToolResult("ok", f"{said} The memory now holds {len(texts)} facts.", events=(event,))


def changed(current: Sequence[str], text: str, *, adds: bool) -> list[str] | ToolResult:
    """The memory after the change, or what the model is told when there is none to make."""
    same = [t for t in current if _matches(t, text)]
    if adds:
        if same:
            return ToolResult("ok", "Already remembered; nothing changed.")
        if len(current) >= MAX_FACTS:
            return ToolResult("error", "", f"the memory is full ({MAX_FACTS} facts): forget one first")
        return [*current, text]
    if not same:
        return ToolResult("error", "", "no remembered fact has that text")
    return [t for t in current if not _matches(t, text)]


def _matches(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()
