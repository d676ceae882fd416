"""Documents through the whole stack: how soon an upload is searchable, pages/s, and what documents cost chat.

One isolated stack (tools/isolated.py) on the synthetic engine, the document
worker included. Four measurements, each next to its baseline from the same run:

1. **First page searchable**: from ``POST /v1/documents`` of a text PDF to
   ``pages_ready >= 1`` (the issue's target: under 5 s), and to ``ready``.
2. **Ingestion pages/s**: text pages and OCR pages (a scanned PDF), each
   measured from the upload to ``ready``.
3. **Retrieval added to TTFT**: turns alternating in one conversation pair:
   one whose conversation has a document attached (hybrid search runs before
   the prompt is built), one without; the difference of the p50s is what
   search adds to the first token.
4. **Chat while a document is read**: TTFT of plain turns while a long
   scanned PDF is OCR'd, against plain turns with the worker idle. The
   document worker runs niced (``PARLEY_DOCUMENTS_NICE``); on these 2 cores
   the question is how much of the OCR's CPU reaches chat anyway.

Run: ``python -m bench.ingest [--turns N]`` with Kafka and Cassandra up (`make infra`).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench.load import pct
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tests.fixtures import documents as fx
from tools import isolated
from tools.client import ParleyClient

PDF = "application/pdf"
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "100",
    "PARLEY_ENGINE_TOKENS_PER_S": "200",
    "PARLEY_CONTEXT_MAX_TOKENS": "16",
}


def text_pages(n: int) -> list[str]:
    return [
        f"Section {i}. The inspection of bridge {i} found {i * 3} cracked bolts and recommended repairs within "
        f"{i + 2} weeks. Traffic on the bridge averages {1000 + 37 * i} vehicles a day, mostly commuters. "
        "The report recommends a second inspection after the winter, when frost damage is most visible."
        for i in range(1, n + 1)
    ]


async def upload_timed(client: ParleyClient, name: str, data: bytes) -> tuple[float, float, dict]:
    """(seconds to the first searchable page, seconds to ready, the document)."""
    began = time.perf_counter()
    doc = await client.upload(name, data, PDF)
    first = None
    while True:
        assert time.perf_counter() - began < 600, f"{name} was not processed in 10 minutes: {doc}"
        doc = await client.document(doc["id"])
        if first is None and doc["pages_ready"] >= 1:
            first = time.perf_counter() - began
        if doc["status"] in ("ready", "failed"):
            assert doc["status"] == "ready", doc
            return first or time.perf_counter() - began, time.perf_counter() - began, doc
        await asyncio.sleep(0.05)


async def ttft(client: ParleyClient, cid: str, text: str) -> float:
    began = time.perf_counter()
    async for event in client.stream_message(cid, text):
        if event.event == "delta":
            return time.perf_counter() - began
    raise AssertionError("no text came back")


async def ttfts(client: ParleyClient, n: int) -> list[float]:
    cid = await client.create_conversation("plain")
    return [await ttft(client, cid, f"plain question {i}") for i in range(n)]


async def measure(stack: isolated.IsolatedStack, turns: int) -> None:
    _, key = stack.create_user("bench", "enterprise")
    client = ParleyClient(stack.url, key)
    ms = 1000.0
    try:
        await upload_timed(client, "warmup.pdf", fx.text_pdf(text_pages(2)))  # the embedder loads on the first job

        first, whole, doc = await upload_timed(client, "bridges.pdf", fx.text_pdf(text_pages(30)))
        print(f"text PDF, 30 pages: first page searchable {first * ms:.0f} ms after upload (target < 5000), "
              f"ready in {whole:.2f} s: {30 / whole:.1f} pages/s")  # fmt: skip
        scan_pages = text_pages(6)
        _, scanned, _ = await upload_timed(client, "scan.pdf", fx.scanned_pdf(scan_pages))
        print(f"scanned PDF, 6 OCR pages: ready in {scanned:.2f} s: {6 / scanned:.2f} pages/s "
              f"(text pages / OCR pages ratio {30 / whole / (6 / scanned):.1f})")  # fmt: skip

        plain_cid = await client.create_conversation("plain")
        docs_cid = await client.create_conversation("with a document")
        attached = await client.upload("bridges.pdf", fx.text_pdf(text_pages(30)), PDF, conversation_id=docs_cid)
        await client.until_processed(attached["id"])
        await ttft(client, plain_cid, "warm-up")
        await ttft(client, docs_cid, "warm-up")
        plain, searched = [], []
        for i in range(turns):
            plain.append(await ttft(client, plain_cid, f"how many bolts cracked on bridge {i % 30 + 1}?"))
            searched.append(await ttft(client, docs_cid, f"how many bolts cracked on bridge {i % 30 + 1}?"))
        p, s = pct(plain, 0.5) * ms, pct(searched, 0.5) * ms
        print(f"TTFT p50: no documents {p:.0f} ms, one 30-page document {s:.0f} ms: search adds {s - p:+.0f} ms "
              f"(ratio {s / p:.2f}); p95 {pct(plain, 0.95) * ms:.0f} vs {pct(searched, 0.95) * ms:.0f} ms")  # fmt: skip

        idle = await ttfts(client, turns)
        job = asyncio.create_task(upload_timed(client, "long-scan.pdf", fx.scanned_pdf(text_pages(40))))
        await asyncio.sleep(2.0)  # the job is past its checks and OCR'ing
        busy = await ttfts(client, turns)
        done = job.done()
        await job
        i, b = pct(idle, 0.5) * ms, pct(busy, 0.5) * ms
        print(f"chat TTFT p50 while 40 pages are OCR'd: {b:.0f} ms vs {i:.0f} ms idle (ratio {b / i:.2f}); "
              f"p95 {pct(busy, 0.95) * ms:.0f} vs {pct(idle, 0.95) * ms:.0f} ms"
              + (" — the job ended before the busy turns did: the ratio understates it" if done else ""))  # fmt: skip
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "benchingest")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), ENV)
        try:
            asyncio.run(measure(stack, args.turns))
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
