"""The embedders: MiniLM from the packaged weights, and the embedding server's client (over httpx's MockTransport)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from documents.embedding import DIMS, MINILM, EmbeddingUnavailable, HttpEmbedder, MiniLM, embedder_from, warm
from documents.settings import DocumentSettings


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


def test_minilm_vectors_are_normalised_and_put_like_meanings_together(minilm: MiniLM) -> None:
    a, b, c = minilm.embed(["The warehouse runs on solar power.", "The depot is powered by the sun.",
                            "Shareholders receive a dividend."])
    assert len(a) == DIMS and math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-5)
    cosine = lambda u, v: sum(x * y for x, y in zip(u, v))  # noqa: E731
    assert cosine(a, b) > cosine(a, c) + 0.2
    assert minilm.embed([]) == []


def test_minilm_batches_and_truncates_without_changing_answers(minilm: MiniLM) -> None:
    texts = [f"page {i} of the report" for i in range(40)]  # more than one batch
    assert minilm.embed(texts)[33] == pytest.approx(minilm.embed([texts[33]])[0], abs=1e-5)
    assert len(minilm.embed(["word " * 2000])[0]) == DIMS


def test_count_tokens_counts_word_pieces(minilm: MiniLM) -> None:
    assert minilm.count_tokens("hello world") == 2
    assert minilm.count_tokens("descaling") > 1


def server(answer) -> tuple[HttpEmbedder, list[dict]]:
    seen: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append({"url": str(request.url), **json.loads(request.content)})
        return answer(seen[-1])

    client = httpx.Client(transport=httpx.MockTransport(handle))
    return HttpEmbedder("http://embed:30000/", "m", timeout_s=1, client=client), seen


def test_http_embedder_posts_the_openai_shape_and_orders_by_index() -> None:
    def answer(body: dict) -> httpx.Response:
        data = [{"index": i, "embedding": [float(i + 1)] + [0.0] * (DIMS - 1)} for i in range(len(body["input"]))]
        return httpx.Response(200, json={"data": list(reversed(data))})

    embedder, seen = server(answer)
    vectors = embedder.embed(["a", "b"])
    assert seen == [{"url": "http://embed:30000/v1/embeddings", "model": "m", "input": ["a", "b"]}]
    assert [v[0] for v in vectors] == [1.0, 1.0]  # normalised, in input order
    assert embedder.embed([]) == [] and len(seen) == 1


def test_http_embedder_refuses_vectors_of_another_size_and_names_the_setting() -> None:
    embedder, _ = server(lambda body: httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0] * 768}]}))
    with pytest.raises(EmbeddingUnavailable, match="PARLEY_DOCUMENTS_EMBEDDER_MODEL"):
        embedder.embed(["a"])


def test_http_embedder_translates_server_errors() -> None:
    embedder, _ = server(lambda body: httpx.Response(503, text="overloaded"))
    with pytest.raises(EmbeddingUnavailable, match="PARLEY_DOCUMENTS_EMBEDDER_URL"):
        embedder.embed(["a"])


def test_embedder_from_settings() -> None:
    assert embedder_from(DocumentSettings(embedder_url="")).name == MINILM
    remote = embedder_from(DocumentSettings(embedder_url="http://e:1", embedder_model="x"))
    assert isinstance(remote, HttpEmbedder) and remote.name == "x"


def test_warming_loads_the_in_process_model_and_asks_no_server() -> None:
    cold = MiniLM()
    assert warm(cold) is True
    assert cold._model is not None  # loaded before any question, not inside its search budget
    asked: list[httpx.Request] = []
    server = HttpEmbedder("http://embedder", "m", timeout_s=1, client=httpx.Client(transport=httpx.MockTransport(asked.append)))
    assert warm(server) is False and asked == []
