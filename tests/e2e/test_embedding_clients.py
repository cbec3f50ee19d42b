"""/v1/embeddings and /v1/rerank as real clients see them: the openai SDK (base64 by default),
LangChain's OpenAIEmbeddings and a RAG retriever over its InMemoryVectorStore, and a reranker
through plain httpx and Cohere's SDK.

One host serves the demo embedding model and the demo reranker. Their weights are random, so
nothing here asserts what a text means: only what a client is promised (shapes, unit norms, one
vector per text whatever the wire format, identical text ranked first, scores in order).
The host's own contract (every input form, limits, cancellation) is tested in test_embeddings.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import cohere
import httpx
import numpy as np
import openai
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import OpenAIEmbeddings

from mlxhost.demo import make_model
from mlxhost.testing import RunningHost, start_host

pytestmark = pytest.mark.e2e

EMBED, RERANK = "embedder", "reranker"
TEXTS = [
    "def add(a, b):\n    return a + b",
    "the cat sat on the mat",
    "Paris is the capital of France",
    "naïve café ✓",
]
DOCUMENTS = ["the cat sat", "dogs bark at night", "a cat is a small feline", "stock prices fell", "x"]


class Served:
    """The shared host, and the embedding model's width (its config's hidden_size)."""

    def __init__(self, host: RunningHost, width: int) -> None:
        self.host = host
        self.width = width
        assert host.url is not None
        self.url: str = host.url


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("clients")
    embedder = make_model(root / "embed", size="tiny", task="embed")
    reranker = make_model(root / "rerank", size="tiny", task="rerank")
    config = root / "models.toml"
    # The embedder is known from its sentence-transformers files; a decoder reranker's files are
    # a causal LM's, so its [[model]] says what it is for.
    config.write_text(
        f'[[model]]\nid = "{EMBED}"\npath = "{embedder}"\n\n'
        f'[[model]]\nid = "{RERANK}"\npath = "{reranker}"\ntask = "rerank"\n'
    )
    width = json.loads((embedder / "config.json").read_text())["hidden_size"]
    with start_host("--config", str(config), timeout=120) as running:
        yield Served(running, width)


@pytest.fixture(scope="module")
def sdk(served: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def langchain_embeddings(served: Served) -> OpenAIEmbeddings:
    # check_embedding_ctx_length=False: otherwise LangChain tokenizes with tiktoken first, which
    # downloads its encoding (CI has no internet), and sends token ids, not the texts.
    return OpenAIEmbeddings(
        model=EMBED,
        base_url=f"{served.url}/v1",
        api_key="unused",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
        timeout=120,
    )


def sdk_vectors(sdk: openai.OpenAI, texts: list[str], **kwargs: object) -> np.ndarray:
    reply = sdk.embeddings.create(model=EMBED, input=texts, **kwargs)  # type: ignore[arg-type]
    assert [d.index for d in reply.data] == list(range(len(texts)))
    return np.array([d.embedding for d in reply.data], dtype=np.float64)


def assert_unit_rows(vectors: np.ndarray) -> None:
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_the_sdk_decodes_base64_to_the_float_vectors(sdk: openai.OpenAI, served: Served) -> None:
    raw = sdk.embeddings.with_raw_response.create(model=EMBED, input=TEXTS)
    # Asked without encoding_format, the SDK asks for base64 and decodes it itself.
    assert json.loads(raw.http_request.content)["encoding_format"] == "base64"
    assert isinstance(raw.http_response.json()["data"][0]["embedding"], str)
    reply = raw.parse()
    decoded = np.array([d.embedding for d in reply.data], dtype=np.float64)
    assert reply.model == EMBED
    assert decoded.shape == (len(TEXTS), served.width)
    assert_unit_rows(decoded)
    floats = sdk_vectors(sdk, TEXTS, encoding_format="float")
    assert np.abs(decoded - floats).max() < 1e-5
    assert reply.usage.prompt_tokens > 0 and reply.usage.total_tokens == reply.usage.prompt_tokens


def test_dimensions_truncates_and_renormalises(sdk: openai.OpenAI) -> None:
    full = sdk_vectors(sdk, TEXTS)
    short = sdk_vectors(sdk, TEXTS, dimensions=8)
    assert short.shape == (len(TEXTS), 8)
    assert_unit_rows(short)
    prefix = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    assert np.abs(short - prefix).max() < 1e-5


def test_langchain_embeddings_equal_the_sdks(
    sdk: openai.OpenAI, langchain_embeddings: OpenAIEmbeddings, served: Served
) -> None:
    documents = np.array(langchain_embeddings.embed_documents(TEXTS), dtype=np.float64)
    query = np.array(langchain_embeddings.embed_query(TEXTS[1]), dtype=np.float64)
    expected = sdk_vectors(sdk, TEXTS)
    assert documents.shape == (len(TEXTS), served.width)
    assert np.abs(documents - expected).max() < 1e-5
    # One text alone (the query) and in a batch give the same vector, to the batching's rounding.
    assert np.abs(query - expected[1]).max() < 1e-4


def test_a_retriever_ranks_the_identical_document_first(langchain_embeddings: OpenAIEmbeddings) -> None:
    store = InMemoryVectorStore.from_documents(
        [Document(page_content=t, metadata={"n": n}) for n, t in enumerate(TEXTS)], langchain_embeddings
    )
    retriever = store.as_retriever(search_kwargs={"k": 2})
    for n, text in enumerate(TEXTS):
        found = retriever.invoke(text)
        # Identical text, identical vector: cosine 1, above any other document, random weights or not.
        assert len(found) == 2
        assert found[0].page_content == text and found[0].metadata["n"] == n
        assert found[1].page_content != text


def rerank(served: Served, **body: object) -> dict:  # type: ignore[type-arg]
    with httpx.Client(base_url=served.url, timeout=120) as http:
        response = http.post("/v1/rerank", json={"model": RERANK, **body})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_rerank_over_http_orders_scores_and_honours_top_n(served: Served) -> None:
    query = "cats"
    mixed = [
        d if n % 2 else {"text": d} for n, d in enumerate(DOCUMENTS)
    ]  # strings and {text}, as callers send
    whole = rerank(served, query=query, documents=mixed)
    results = whole["results"]
    scores = [r["relevance_score"] for r in results]
    assert whole["model"] == RERANK
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    assert scores == sorted(scores, reverse=True)
    assert all(r["document"]["text"] == DOCUMENTS[r["index"]] for r in results)
    assert whole["usage"]["total_tokens"] > 0

    top = rerank(served, query=query, documents=DOCUMENTS, top_n=2, return_documents=False)
    assert len(top["results"]) == 2
    assert all("document" not in r for r in top["results"])
    # The best two of the whole ranking, with the same scores: a document's form changes nothing.
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert np.allclose([r["relevance_score"] for r in top["results"]], scores[:2], atol=1e-5)


def test_rerank_through_cohere_sdk(served: Served) -> None:
    # Cohere's v1 client posts to {base_url}/v1/rerank; its v2 client's /v2/rerank is not served.
    client = cohere.Client(api_key="unused", base_url=served.url, timeout=120)
    reply = client.rerank(model=RERANK, query="cats", documents=DOCUMENTS, top_n=3, return_documents=True)
    expected = rerank(served, query="cats", documents=DOCUMENTS, top_n=3)
    assert [r.index for r in reply.results] == [r["index"] for r in expected["results"]]
    assert np.allclose(
        [r.relevance_score for r in reply.results],
        [r["relevance_score"] for r in expected["results"]],
        atol=1e-5,
    )
    assert all(r.document is not None and r.document.text == DOCUMENTS[r.index] for r in reply.results)
