"""/v1/embeddings and /v1/rerank on a real host: every input form, batching that does not change a
vector, the limits as clear 400s, a client that leaves and a worker that dies mid-batch.

One host serves the demo embedding model, the demo reranker, and the tiny chat model with
embeddings as well (one worker, both routes). The real clients (openai, LangChain, a retriever)
are in test_embedding_clients.py; the pure parts in tests/unit/test_pooled_*.py.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from mlxhost.demo import make_model
from mlxhost.demo.encoder import make_encoder_model
from mlxhost.testing import RunningHost, start_host, wait_until
from tests.e2e.raw_http import netloc

pytestmark = pytest.mark.e2e

EMBED, RERANK, CHAT = "embedder", "reranker", "chatty"
TEXTS = ["def add(a, b):\n    return a + b", "the cat sat on the mat", "x", "naïve café ✓"]


@pytest.fixture(scope="module")
def host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    root = tmp_path_factory.mktemp("pooled")
    embedder = make_model(root / "embed", task="embed")
    reranker = make_model(root / "rerank", task="rerank")
    config = root / "models.toml"
    config.write_text(
        f'[[model]]\nid = "{EMBED}"\npath = "{embedder}"\n\n'
        f'[[model]]\nid = "{RERANK}"\npath = "{reranker}"\ntask = "rerank"\n\n'
        f'[[model]]\nid = "{CHAT}"\npath = "{tiny_model}"\ntask = ["generate", "embed"]\n'
    )
    with start_host("--config", str(config), "--max-resident", "3") as running:
        yield running


def embed(host: RunningHost, **body: Any) -> httpx.Response:
    with host.http(timeout=120) as http:
        return http.post("/v1/embeddings", json={"model": EMBED, **body})


def vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    return np.array([d["embedding"] for d in data], dtype=np.float32)


def test_every_input_form_gives_unit_vectors_with_usage(host: RunningHost) -> None:
    one = embed(host, input=TEXTS[0])
    many = embed(host, input=TEXTS)
    ids = [[5, 6, 7], [8, 9]]
    as_ids = embed(host, input=ids[0])
    lists = embed(host, input=ids)
    assert vectors(one).shape == (1, 64) and vectors(many).shape == (4, 64)
    assert np.allclose(np.linalg.norm(vectors(many), axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors(one)[0], vectors(many)[0], atol=1e-5)
    assert np.allclose(vectors(as_ids)[0], vectors(lists)[0], atol=1e-5)
    assert lists.json()["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert many.json()["model"] == EMBED and many.json()["object"] == "list"


def test_a_text_gives_the_same_vector_alone_and_in_a_batch_of_64(host: RunningHost) -> None:
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "return", "def", "class", "import", "lambda"]
    batch = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 120, size=64)]
    batch[17] = TEXTS[0]
    together = vectors(embed(host, input=batch))
    alone = vectors(embed(host, input=TEXTS[0]))[0]
    assert np.abs(together[17] - alone).max() < 1e-4
    assert np.abs(together[3] - vectors(embed(host, input=batch[3]))[0]).max() < 1e-4


def test_base64_is_the_float32_vector(host: RunningHost) -> None:
    floats = vectors(embed(host, input=TEXTS[:2]))
    answer = embed(host, input=TEXTS[:2], encoding_format="base64")
    assert answer.status_code == 200
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in answer.json()["data"]]
    assert np.array_equal(np.stack(decoded), floats)


def test_dimensions_keeps_the_leading_values_normalised(host: RunningHost) -> None:
    full = vectors(embed(host, input=TEXTS[1]))[0]
    short = vectors(embed(host, input=TEXTS[1], dimensions=8))[0]
    assert short.shape == (8,)
    assert np.allclose(short, full[:8] / np.linalg.norm(full[:8]), atol=1e-5)


def test_a_query_gets_the_models_instruction(host: RunningHost) -> None:
    plain = vectors(embed(host, input=TEXTS[1]))[0]
    query = embed(host, input=TEXTS[1], input_type="query")
    assert not np.allclose(vectors(query)[0], plain, atol=1e-3)
    plain_tokens = embed(host, input=TEXTS[1]).json()["usage"]["prompt_tokens"]
    assert query.json()["usage"]["prompt_tokens"] > plain_tokens


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": ["x"] * 2049}, "input", "at most 2048 inputs"),
        ({"input": ""}, "input", "must not be empty"),
        ({"input": ["a", ""]}, "input", "input[1] must not be empty"),
        ({"input": []}, "input", "empty list"),
        ({"input": [[1, 2], [10**6]]}, "input", "not in the model's vocabulary"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", ""),
        ({"input": "x", "dimensions": 65}, "dimensions", "at most 64"),
        ({"input": "x", "colour": 1}, "colour", "unsupported parameter"),
        ({"input": "x", "model": CHAT, "dimensions": 8}, "dimensions", "not trained"),
        ({"input": "x", "model": RERANK}, "model", "does not serve /v1/embeddings"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(
    host: RunningHost, body: dict[str, Any], param: str, words: str
) -> None:
    response = embed(host, **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_an_input_too_long_is_cut_to_fit_only_when_asked(host: RunningHost) -> None:
    context = host.worker_health(EMBED)["context_length"]
    long = [(i % 500) + 5 for i in range(context + 40)]
    refused = embed(host, input=[long])
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert f"input[0] is {context + 40} tokens" in refused.json()["error"]["message"]
    cut = embed(host, input=[long], truncate=True)
    assert cut.json()["usage"]["prompt_tokens"] == context
    assert np.allclose(vectors(cut)[0], vectors(embed(host, input=[long[:context]]))[0], atol=1e-5)


def test_a_chat_model_that_embeds_serves_both_from_one_worker(host: RunningHost) -> None:
    with host.http(timeout=60) as http:
        chat = http.post(
            "/v1/chat/completions",
            json={"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        embedded = http.post("/v1/embeddings", json={"model": CHAT, "input": "hi"})
    assert chat.status_code == 200 and vectors(embedded).shape == (1, 64)
    assert len([w for w in host.health()["workers"] if w["model"] == CHAT]) == 1
    with host.http() as http:
        refused = http.post(
            "/v1/chat/completions", json={"model": EMBED, "messages": [{"role": "user", "content": "hi"}]}
        )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "model"


def test_rerank_orders_by_score_and_honours_top_n(host: RunningHost) -> None:
    documents = ["the cat sat", {"text": "dogs bark"}, "a cat is a small feline", "stock prices", "x"]
    with host.http(timeout=60) as http:
        whole = http.post("/v1/rerank", json={"model": RERANK, "query": "cats", "documents": documents})
        top = http.post(
            "/rerank", json={"query": "cats", "documents": documents, "top_n": 2, "return_documents": False}
        )
    assert whole.status_code == 200, whole.text
    results = whole.json()["results"]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert sorted(r["index"] for r in results) == list(range(5))
    texts = [d if isinstance(d, str) else d["text"] for d in documents]
    assert all(r["document"]["text"] == texts[r["index"]] for r in results)
    assert top.json()["model"] == RERANK  # no model named: the one that reranks
    assert top.json()["results"] == [
        {"index": r["index"], "relevance_score": r["relevance_score"]} for r in results[:2]
    ]


def test_rerank_refuses_what_it_cannot_score(host: RunningHost) -> None:
    with host.http() as http:
        empty = http.post("/v1/rerank", json={"model": RERANK, "query": "q", "documents": []})
        embedder = http.post("/v1/rerank", json={"model": EMBED, "query": "q", "documents": ["d"]})
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "documents"
    assert embedder.status_code == 400 and embedder.json()["error"]["param"] == "model"


def long_request(count: int = 2048) -> dict[str, Any]:
    """About 20 s of passes for the tiny model on this machine: inputs of 140 token ids each."""
    return {"model": EMBED, "input": [[(i * 7 + j) % 500 + 10 for j in range(140)] for i in range(count)]}


def pooled(host: RunningHost) -> dict[str, Any]:
    return host.worker_health(EMBED)["pooled"]  # type: ignore[no-any-return]


def test_a_client_that_leaves_mid_batch_frees_its_rows(host: RunningHost) -> None:
    vectors(embed(host, input="warm"))  # loaded, in whatever order the tests run
    before = pooled(host)
    body = json.dumps(long_request()).encode()
    head = f"POST /v1/embeddings HTTP/1.1\r\nhost: {netloc(host)}\r\ncontent-type: application/json\r\n"
    address, port = netloc(host).split(":")
    with socket.create_connection((address, int(port)), timeout=30) as client:
        client.sendall(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
        wait_until(lambda: pooled(host)["passes"] > before["passes"])  # its first pass ran
    # It left: its inputs not yet in a pass are dropped, and the worker is free again at once.
    after = wait_until(lambda: (p := pooled(host))["cancelled"] > before["cancelled"] and p)
    assert after["inputs"] - before["inputs"] < 2048
    assert vectors(embed(host, input="after")).shape == (1, 64)
    with host.http() as http:
        recent = http.get("/admin/sessions").json()["recent"]
    left = [s for s in recent if s.get("kind") == "embed" and s["outcome"]["kind"] == "cancelled"]
    assert left and left[-1]["outcome"]["reason"] == "client_disconnected"


def test_a_worker_killed_during_a_batch_gives_a_clean_error_and_comes_back(host: RunningHost) -> None:
    vectors(embed(host, input="warm"))
    passes, old = pooled(host)["passes"], host.worker(EMBED)["pid"]
    answer: list[httpx.Response] = []
    request = threading.Thread(target=lambda: answer.append(embed(host, **long_request())))
    request.start()
    wait_until(lambda: pooled(host)["passes"] > passes)  # its first pass ran: it is mid-batch
    os.kill(old, signal.SIGKILL)
    request.join(60)
    assert answer and answer[0].status_code in (502, 503), answer[0].text
    assert "worker" in answer[0].json()["error"]["message"]
    wait_until(
        lambda: (w := host.worker(EMBED))["state"] == "ready" and w["pid"] not in (None, old), timeout=60
    )
    assert vectors(embed(host, input="back")).shape == (1, 64)


def test_embeddings_past_the_queue_get_a_429_and_a_deadline_stops_a_batch(tmp_path: Path) -> None:
    embedder = make_model(tmp_path / "embed", task="embed")
    config = tmp_path / "one.toml"
    config.write_text(f'[[model]]\nid = "{EMBED}"\npath = "{embedder}"\nmax_active = 1\nmax_queued = 0\n')
    with start_host("--config", str(config), "--request-timeout", "5") as narrow:
        vectors(embed(narrow, input="warm"))
        before = pooled(narrow)
        answers: list[httpx.Response] = []
        holder = threading.Thread(target=lambda: answers.append(embed(narrow, **long_request())))
        holder.start()
        wait_until(lambda: narrow.health()["admission"][EMBED]["active"] == 1)  # it holds the one slot
        refused = embed(narrow, input="more")
        holder.join(30)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "at capacity" in refused.json()["error"]["message"]
        # Its 20 s of passes ran past the 5 s deadline: stopped, its inputs not yet run dropped.
        assert answers[0].status_code == 504 and answers[0].json()["error"]["code"] == "deadline"
        assert wait_until(lambda: pooled(narrow)["cancelled"] > before["cancelled"])
        wait_until(lambda: narrow.health()["admission"][EMBED]["active"] == 0)
        assert vectors(embed(narrow, input="more")).shape == (1, 64)


def test_an_encoder_model_embeds_through_mlx_embeddings(tmp_path: Path) -> None:
    pytest.importorskip("mlx_embeddings")  # the extra, which the test extra installs
    encoder = make_encoder_model(tmp_path / "bert", pooling="mean")
    with start_host("--model", f"bert={encoder}") as bert:
        with bert.http(timeout=60) as http:
            alone = http.post("/v1/embeddings", json={"input": TEXTS[1]})
            batch = http.post("/v1/embeddings", json={"input": [TEXTS[0], TEXTS[1], "x y z " * 20]})
            chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
            too_long = http.post("/v1/embeddings", json={"input": "word " * 400})
        assert vectors(alone).shape == (1, 32)
        assert np.abs(vectors(batch)[1] - vectors(alone)[0]).max() < 1e-4  # padding is masked out
        assert (
            chat.status_code == 400
            and "does not serve /v1/chat/completions" in chat.json()["error"]["message"]
        )
        assert too_long.status_code == 400 and "context is 128 tokens" in too_long.json()["error"]["message"]
        assert bert.worker_health()["tasks"] == ["embed"]


def test_an_encoder_mlx_embeddings_cannot_run_is_refused_at_start(tmp_path: Path) -> None:
    encoder = make_encoder_model(tmp_path / "roberta")
    config = json.loads((encoder / "config.json").read_text())
    (encoder / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    with pytest.raises(RuntimeError, match="roberta encoder, and mlx-embeddings runs only"):
        start_host("--model", str(encoder))


def test_rerank_blames_the_field_that_is_too_long(host: RunningHost) -> None:
    """A query (or instruction) that leaves no room is named as such, before the documents are
    tokenized; a document too long is named by its index, with advice rerank takes."""
    long_text = "the weather in the north is cold " * 1400  # about 9,000 tokens: past the context
    with host.http() as http:
        query = http.post("/v1/rerank", json={"model": RERANK, "query": long_text, "documents": ["a"] * 1000})
        instruction = http.post(
            "/v1/rerank", json={"model": RERANK, "query": "q", "instruction": long_text, "documents": ["a"]}
        )
        document = http.post("/v1/rerank", json={"model": RERANK, "query": "q", "documents": ["a", long_text]})
    assert query.status_code == 400 and query.json()["error"]["param"] == "query"
    assert "shorten the query" in query.json()["error"]["message"]
    assert instruction.status_code == 400 and instruction.json()["error"]["param"] == "instruction"
    error = document.json()["error"]
    assert document.status_code == 400 and error["param"] == "documents[1]"
    assert "truncate: true" not in error["message"] and "shorten it" in error["message"]


def _answered_first(host: RunningHost, first: dict[str, Any], then: tuple[str, dict[str, Any]]) -> bool:
    """Start embedding `first`, and once the host has admitted it, send `then` (a route and a
    body); whether `then` was answered while `first` still ran. `first` is cancelled after."""
    done = threading.Event()

    def embed_first() -> None:
        with host.http(timeout=300) as http:
            http.post("/v1/embeddings", json=first)
        done.set()

    with host.http(timeout=120) as admin:
        opened = admin.get("/admin/sessions").json()["opened"]
        big = threading.Thread(target=embed_first)
        big.start()
        wait_until(lambda: admin.get("/admin/sessions").json()["opened"] > opened, timeout=30)
        answer = admin.post(then[0], json=then[1])
        assert answer.status_code == 200, answer.text
        ahead = not done.is_set()
        for session in admin.get("/admin/sessions").json()["live"]:
            admin.post(f"/admin/sessions/{session['id']}/cancel")
        big.join(timeout=120)
    return ahead


def test_a_small_embeddings_request_is_not_held_behind_a_huge_one(host: RunningHost) -> None:
    """The probe: 6 inputs of 3,900 token ids, then one token. Passes from the two alternate, so
    the small one is answered while the huge one still runs (before: together, 20 s later)."""
    huge = {"model": EMBED, "input": [[5] * 3900 for _ in range(6)]}
    assert _answered_first(host, huge, ("/v1/embeddings", {"model": EMBED, "input": [[7]]}))


def test_a_stream_beside_a_large_embeddings_request_is_not_frozen(host: RunningHost) -> None:
    """64 inputs of 200 tokens planned before a chat stream arrives: no pass is planned longer
    than 0.15 s, so the stream's 16 tokens come between them (before: one 2 s pass)."""
    inputs = [[(i % 50) + 3] * 200 for i in range(64)]
    chat = {"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}
    assert _answered_first(host, {"model": CHAT, "input": inputs}, ("/v1/chat/completions", chat))
