"""Settings of the document pipeline (``PARLEY_DOCUMENTS_*``), read at start-up.

One class: the gateway reads the upload limits and the blob store, the
document worker everything, the context builder the search settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parley.settings import REPO_ROOT, env

PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class DocumentSettings:
    # ------------------------------------------------------------ upload and storage (gateway)
    blob_url: str = env(
        "PARLEY_DOCUMENTS_BLOB_URL",
        str(REPO_ROOT / ".data" / "documents"),
        "Where originals are kept: a local directory, or any fsspec URL (s3://bucket/prefix needs s3fs)",
    )
    max_bytes: int = env("PARLEY_DOCUMENTS_MAX_BYTES", 25 * 1024 * 1024, "Largest file accepted (413 above it)")
    max_documents_per_message: int = env(
        "PARLEY_DOCUMENTS_MAX_PER_MESSAGE", 8, "Most documents one message may name in document_ids"
    )

    # ------------------------------------------------------------ safety (document worker)
    max_pages: int = env("PARLEY_DOCUMENTS_MAX_PAGES", 500, "Most pages a document may have (refused above it)")
    max_uncompressed_bytes: int = env(
        "PARLEY_DOCUMENTS_MAX_UNCOMPRESSED_BYTES",
        200 * 1024 * 1024,
        "Most bytes a container (DOCX zip, PDF streams) may expand to before it is refused as a decompression bomb",
    )
    max_compression_ratio: float = env(
        "PARLEY_DOCUMENTS_MAX_COMPRESSION_RATIO", 200.0, "Highest expansion ratio of a zip member (a bomb's signature)"
    )
    clamscan: str = env("PARLEY_DOCUMENTS_CLAMSCAN", "clamscan", "The virus scanner run on every upload; empty: no scan")
    clamav_db: str = env(
        "PARLEY_DOCUMENTS_CLAMAV_DB",
        str(PACKAGE / "signatures"),
        "Signature directory for clamscan (production: freshclam's, /var/lib/clamav); the shipped one knows EICAR",
    )
    real_signatures: bool = env(
        "PARLEY_DOCUMENTS_REAL_SIGNATURES",
        False,
        "Refuse to start unless PARLEY_DOCUMENTS_CLAMAV_DB holds ClamAV's own databases (main and daily, as "
        "freshclam writes them): every shipped deployment sets it; the local default (EICAR only) is for make run",
    )
    scan_timeout_s: float = env("PARLEY_DOCUMENTS_SCAN_TIMEOUT_S", 60.0, "Longest a scan may take (refused after)")

    # ------------------------------------------------------------ extraction (document worker)
    page_timeout_s: float = env(
        "PARLEY_DOCUMENTS_PAGE_TIMEOUT_S", 30.0, "Longest one page's extraction (OCR included) may take; then it is skipped"
    )
    open_timeout_s: float = env(
        "PARLEY_DOCUMENTS_OPEN_TIMEOUT_S", 60.0, "Longest parsing a whole document (to count its pages) may take"
    )
    document_timeout_s: float = env(
        "PARLEY_DOCUMENTS_DOCUMENT_TIMEOUT_S",
        3600.0,
        "Longest one document's reading (checks, every page, OCR) may take, wall clock; then it fails (budget_exceeded)",
    )
    document_cpu_s: int = env(
        "PARLEY_DOCUMENTS_DOCUMENT_CPU_S",
        1200,
        "CPU seconds the extraction child may spend on one document (RLIMIT_CPU); then it fails (budget_exceeded)",
    )
    child_memory_mb: int = env(
        "PARLEY_DOCUMENTS_CHILD_MEMORY_MB",
        2048,
        "Address space of the extraction child process (and its tesseract): a hostile page fails instead of the worker",
    )
    ocr: bool = env("PARLEY_DOCUMENTS_OCR", True, "Read pages without a text layer with tesseract")
    ocr_dpi: int = env("PARLEY_DOCUMENTS_OCR_DPI", 200, "Resolution pages are rendered at for OCR")
    ocr_languages: str = env("PARLEY_DOCUMENTS_OCR_LANGUAGES", "eng", "tesseract's -l (installed language packs)")
    batch_pages: int = env(
        "PARLEY_DOCUMENTS_BATCH_PAGES",
        4,
        "Pages indexed before a DocumentPagesExtracted makes them searchable (smaller: first pages sooner)",
    )
    nice: int = env(
        "PARLEY_DOCUMENTS_NICE", 10, "Scheduling niceness of the document worker: chat's processes go first on a shared CPU"
    )

    # ------------------------------------------------------------ chunking and search
    chunk_tokens: int = env("PARLEY_DOCUMENTS_CHUNK_TOKENS", 200, "Token budget of one chunk (the embedder's tokens)")
    chunk_overlap_tokens: int = env("PARLEY_DOCUMENTS_CHUNK_OVERLAP_TOKENS", 40, "Tokens a chunk repeats of the one before")
    embedder_url: str = env(
        "PARLEY_DOCUMENTS_EMBEDDER_URL",
        "",
        "An embedding server's base URL (OpenAI /v1/embeddings, as SGLang serves it); empty: all-MiniLM-L6-v2 in process",
    )
    embedder_model: str = env(
        "PARLEY_DOCUMENTS_EMBEDDER_MODEL", "sentence-transformers/all-MiniLM-L6-v2", "Model name sent to the embedding server"
    )
    embedder_timeout_s: float = env(
        "PARLEY_DOCUMENTS_EMBEDDER_TIMEOUT_S", 30.0, "Longest one request to the embedding server may take (a page's chunks)"
    )
    embedder_warm: bool = env(
        "PARLEY_DOCUMENTS_EMBEDDER_WARM",
        True,
        "The context builder loads the in-process embedding model at start-up, before it joins its group; false: at the "
        "first question that names a document, whose search may then answer from keywords alone while the model loads",
    )
    reranker_url: str = env(
        "PARLEY_DOCUMENTS_RERANKER_URL", "", "A reranking server's base URL (SGLang /v1/rerank); empty: the fused score"
    )
    reranker_model: str = env("PARLEY_DOCUMENTS_RERANKER_MODEL", "BAAI/bge-reranker-v2-m3", "Model name sent to the reranking server")
    retrieve_k: int = env("PARLEY_DOCUMENTS_RETRIEVE_K", 20, "Candidates each search (keyword, vector) returns per document")
    passages: int = env("PARLEY_DOCUMENTS_PASSAGES", 5, "Passages a turn's prompt shows at most")
    passage_tokens: int = env(
        "PARLEY_DOCUMENTS_PASSAGE_TOKENS", 900, "Prompt tokens the passages may take, out of the context budget"
    )
    hybrid_alpha: float = env(
        "PARLEY_DOCUMENTS_HYBRID_ALPHA",
        0.9,
        "Weight of vector search against keyword (BM25) search in hybrid fusion, in [0, 1]: each search's scores over "
        "its best, then alpha * vector + (1 - alpha) * keyword. 0.9 was chosen on bench/retrieval's dev half "
        "(best recall@5 over alpha and its neighbours); its held-out half is reported there",
    )
    search_timeout_s: float = env(
        "PARLEY_DOCUMENTS_SEARCH_TIMEOUT_S", 2.0, "Longest one search may take before the turn goes on without it"
    )
