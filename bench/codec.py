"""Codec throughput: Avro single-object encoding against json.dumps/loads of the same records.

Prints events/s for both and the ratio, measured in one process, so the figure
means something on a shared, noisy machine. Run: `python -m bench.codec`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from schemas import codec
from schemas.events import TokenChunk, Usage
from schemas.records import to_record


def _rate(fn: Callable[[], object], n: int) -> float:
    best = 0.0
    for _ in range(3):  # best of three: the least disturbed run
        began = time.perf_counter()
        for _ in range(n):
            fn()
        best = max(best, n / (time.perf_counter() - began))
    return best


def main(n: int = 20_000) -> None:
    chunk = TokenChunk(
        conversation_id="6f1c7e1e-8d4b-4a43-9c4e-0f3a9f0f2b11",
        user_id="user-42",
        request_id="0b8e0c5e-5f51-5a7b-8f0d-36f5d2f1e9aa",
        seq=17,
        text=" the quick brown fox jumps over",
        tokens=7,
        usage=Usage(prompt_tokens=812, cached_tokens=768, completion_tokens=120),
    )
    encoded = codec.encode(chunk)
    as_json = json.dumps(to_record(chunk)).encode()
    rows = [
        ("encode", _rate(lambda: codec.encode(chunk), n), _rate(lambda: json.dumps(to_record(chunk)).encode(), n)),
        ("decode", _rate(lambda: codec.decode(encoded), n), _rate(lambda: TokenChunk(**_from_json(as_json)), n)),
    ]
    print(f"TokenChunk: avro {len(encoded)} bytes, json {len(as_json)} bytes ({len(encoded) / len(as_json):.2f}x)")
    for what, avro, baseline in rows:
        print(f"{what}: avro-soe {avro:,.0f} ev/s  json baseline {baseline:,.0f} ev/s  ratio {avro / baseline:.2f}")


def _from_json(data: bytes) -> dict:
    record = json.loads(data)
    record["usage"] = Usage(**record["usage"])
    return record


if __name__ == "__main__":
    main()
