"""``python -m streams.tool_executor``: the tool executor (workers/tool_executor.py) with the built-ins over
the users' own data, ``search_documents``, ``remember`` and ``forget`` (streams/tool_builtins.py), and the
organisations' own MCP servers (parley/org_tools.py).

Their runners need Cassandra (the documents and their index), the ``user.memory`` log and the streams'
document search, a layer above workers/, so they are built here and handed in. Each is opened on the
first call of its kind: an executor whose tools file names none of them never connects to Cassandra.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from parley.errors import ConfigError
from parley.settings import CassandraSettings, KafkaSettings, from_env
from parley.tool_registry import ToolSpec
from streams.tool_builtins import DocumentsTool, MemoryTool
from workers import tool_executor

#: How long a memory change waits to read the user's memory to its end before the call ends in error.
MEMORY_READ_S = 10.0


class LogMemories:
    """The users' memory from the ``user.memory`` log (streams/readers.py MemoryReader), read to the end of
    the user's partition before each answer; one reader for the process, used off the event loop."""

    def __init__(self, kafka: KafkaSettings) -> None:
        from streams.readers import MemoryReader

        self._reader = MemoryReader(kafka)
        self._lock = asyncio.Lock()  # remember and forget share the reader, which is not thread-safe

    async def facts(self, user_id: str) -> list[str]:
        async with self._lock:
            return await asyncio.to_thread(self._reader.latest, user_id, MEMORY_READ_S)


def factories(kafka: KafkaSettings) -> tool_executor.Factories:
    """kind → a runner's factory; what they share (the store, the memory reader) opened once, lazily."""
    opened: dict[str, Any] = {}

    def store() -> Any:
        if "store" not in opened:
            from streams.store import Store

            opened["store"] = Store(from_env(CassandraSettings))
        return opened["store"]

    def documents(spec: ToolSpec) -> DocumentsTool:
        return DocumentsTool(store(), document_search(store()))

    def memory(spec: ToolSpec) -> MemoryTool:
        if "memories" not in opened:
            opened["memories"] = LogMemories(kafka)
        return MemoryTool(spec.name, opened["memories"])

    return {"documents": documents, "memory": memory}


def document_search(store: Any) -> Any:
    """The context builder's document search (streams/processors.py ``_context``), built the same way."""
    from documents.embedding import embedder_from
    from documents.index import DocumentIndex
    from documents.retrieval import Retriever, reranker_from
    from documents.settings import DocumentSettings
    from streams.context_tokens import TokenCounter
    from streams.document_search import DocumentSearch
    from streams.settings import ContextSettings, RouterSettings
    from workers.settings import TemplateSettings

    docs = from_env(DocumentSettings)
    retriever = Retriever(
        DocumentIndex(store.cql), embedder_from(docs), reranker_from(docs), k=docs.retrieve_k,
        timeout_s=docs.search_timeout_s, alpha=docs.hybrid_alpha,
    )
    templates = from_env(TemplateSettings)
    counter = TokenCounter.from_spec(from_env(ContextSettings).tokenizer, templates.of(from_env(RouterSettings).default_pool))
    return DocumentSearch(store, retriever, passages=docs.passages, passage_tokens=docs.passage_tokens, count=counter.segment)


def org_specs() -> tool_executor.OrgSpecs:
    """The organisations' own tools (parley/org_tools.py), read from Cassandra at each call of one; the
    connection is made on the first."""
    from parley.cassandra import AsyncCql
    from parley.org_tools import OrgTools

    return OrgTools(AsyncCql(from_env(CassandraSettings))).spec


def main(argv: list[str] | None = None) -> None:
    try:
        tool_executor.main(argv, factories(from_env(KafkaSettings)), org_specs())
    except ConfigError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
