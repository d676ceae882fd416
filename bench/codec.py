"""Codec throughput: Avro single-object encoding against json.dumps/loads of the same records.

Prints events/s for both and the ratio, measured in one process, so the figure
means something on a shared, noisy machine. Then a sealed chunk (DESIGN.md §12),
its owner's key held as it nearly always is: ``decode_async``, what every
processor runs on its event loop per record (the key service's ``prefetch``,
then the decode), against the synchronous ``decode`` of the same bytes, the
baseline: the ratio is what the loop's step costs per record.
Run: `python -m bench.codec`.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from parley.keys import KeyService, LocalKms, _data_key, _Held
from schemas import codec, sealing
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
    sealed_decoding(chunk, n)


def sealed_decoding(chunk: TokenChunk, n: int) -> None:
    def no_cassandra() -> None:
        raise AssertionError("the key is held: nothing is read")

    with tempfile.TemporaryDirectory() as tmp:
        service = KeyService(no_cassandra, LocalKms(Path(tmp) / "kek"), "bench")  # type: ignore[arg-type]
        # Held, as a running process holds a user's key (the cache's own entry: no Cassandra here).
        service._cache.put(chunk.user_id, _Held(time.monotonic(), _data_key(1, os.urandom(32))))
        sealing.install(service)
        try:
            data = codec.encode(chunk)
            loop = asyncio.new_event_loop()
            try:
                on_loop = _rate(lambda: loop.run_until_complete(_decode_many(data, 1_000)), n // 1_000) * 1_000
            finally:
                loop.close()
            sync = _rate(lambda: codec.decode(data), n)
            print(f"sealed chunk, key held: decode_async {on_loop:,.0f} ev/s  decode (sync) baseline {sync:,.0f} ev/s  "
                  f"ratio {on_loop / sync:.2f}")
        finally:
            sealing.install(None)


async def _decode_many(data: bytes, n: int) -> None:
    for _ in range(n):
        await codec.decode_async(data)


def _from_json(data: bytes) -> dict:
    record = json.loads(data)
    record["usage"] = Usage(**record["usage"])
    return record


if __name__ == "__main__":
    main()
